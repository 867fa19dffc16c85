package lincheck

import (
	"fmt"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/holdfast/holdfast/domain"
)

// The waiting room's operations on one event's line (the key).

// Enter is a user's entry (POST /events/{id}/queue). OK's Value: the Place
// its result reports.
type Enter struct{ User string }

// QueueStatus is GET /events/{id}/queue/status. OK's Value: a Place.
type QueueStatus struct{ User string }

// TakeToken is POST /events/{id}/queue/token. OK: a token. Refusal:
// NOT_YOUR_TURN, with Value the Place its meta names (status, rank).
type TakeToken struct{ User string }

// LeaveRoom is DELETE /events/{id}/queue/token: gives the token and the
// place up. OK.
type LeaveRoom struct{ User string }

// Place is where a user stands: a status (waiting, ready, entered,
// not_queued) and its rank in line (0-based; -1 when it has none).
type Place struct {
	Status string
	Rank   int
}

func (e Enter) String() string       { return e.User + " enters" }
func (q QueueStatus) String() string { return q.User + " asks its status" }
func (k TakeToken) String() string   { return k.User + " takes a token" }
func (l LeaveRoom) String() string   { return l.User + " leaves" }
func (p Place) String() string {
	if p.Rank < 0 {
		return p.Status
	}
	return fmt.Sprintf("%s #%d", p.Status, p.Rank)
}

// roomState is an event's line, in order, and the users holding a token.
type roomState struct {
	max     int
	line    []string
	entered []string // sorted
}

func (s roomState) place(user string) Place {
	if _, ok := slices.BinarySearch(s.entered, user); ok {
		return Place{"entered", -1}
	}
	i := slices.Index(s.line, user)
	switch {
	case i < 0:
		return Place{"not_queued", -1}
	case i < s.max-len(s.entered):
		return Place{"ready", i}
	}
	return Place{"waiting", i}
}

// without is s with user out of the line and holding no token.
func (s roomState) without(user string) roomState {
	if i := slices.Index(s.line, user); i >= 0 {
		s.line = slices.Delete(slices.Clone(s.line), i, i+1)
	}
	if i, ok := slices.BinarySearch(s.entered, user); ok {
		s.entered = slices.Delete(slices.Clone(s.entered), i, i+1)
	}
	return s
}

func (s roomState) String() string {
	return fmt.Sprintf("%d of %d slots taken (%s); line: %s", len(s.entered), s.max, strings.Join(s.entered, ", "),
		strings.Join(s.line, ", "))
}

// WaitingRoom is the model of an event's waiting room (docs/waiting-room.md,
// SPEC §6, §6.1): maxConcurrent maps each key to the event's maxConcurrent
// (an empty room when the history began).
//
// Sequentially: an entry puts a user who is neither in line nor holding a
// token at the back of the line (else it keeps its place) and reports its
// place. A user in line at rank r (0-based) is ready while r is below the
// free slots, maxConcurrent − tokens held, and waiting otherwise; a status
// read reports exactly that, or entered, or not_queued. A token request
// admits a ready user (out of the line, holding a token; a user holding one
// keeps it) and refuses anyone else NOT_YOUR_TURN with its place. Leaving
// gives the token and the place up. So positions never move backwards
// (a rank grows only through the user's own re-entry), admissions follow
// the line (only the first free-slots users may take a token), and the
// counts are exact at every answer.
//
// Time is not modelled: the histories set presenceTimeoutSeconds,
// claimWindowSeconds and tokenTtlSeconds longer than the run, no
// admitPerMinute, no pause, no pre-queue; a status of expired is refused.
func WaitingRoom(maxConcurrent map[string]int) porcupine.Model {
	return spec[roomState]{
		init: func(key string) roomState { return roomState{max: maxConcurrent[key]} },
		step: roomStep,
		equal: func(a, b roomState) bool {
			return a.max == b.max && slices.Equal(a.line, b.line) && slices.Equal(a.entered, b.entered)
		},
		show: roomState.String,
	}.model()
}

func roomStep(s roomState, c Call, out Outcome) (bool, roomState) {
	unknown := out.Status == StatusUnknown
	switch op := c.Op.(type) {
	case Enter:
		if p := s.place(op.User); p.Status == "not_queued" {
			s.line = append(slices.Clone(s.line), op.User)
		}
		return unknown || out.Status == StatusOK && out.Value == s.place(op.User), s
	case QueueStatus:
		return unknown || out.Status == StatusOK && out.Value == s.place(op.User), s
	case TakeToken:
		switch p := s.place(op.User); {
		case p.Status == "ready" && (unknown || out.Status == StatusOK):
			s = s.without(op.User)
			i, _ := slices.BinarySearch(s.entered, op.User)
			s.entered = slices.Insert(slices.Clone(s.entered), i, op.User)
			return true, s
		case p.Status == "entered", unknown:
			return unknown || out.Status == StatusOK, s
		default:
			return out.Code == domain.CodeNotYourTurn && out.Value == p, s
		}
	case LeaveRoom:
		return unknown || out.Status == StatusOK, s.without(op.User)
	}
	return false, s
}
