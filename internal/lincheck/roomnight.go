package lincheck

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/holdfast/holdfast/domain"
)

// The stays operations on one room type's night (the key), each hold
// covering that one night.

// PlaceHold is a user's hold (POST /holds). OK's Value: a HoldGrant.
// Refusals: NOT_AVAILABLE, CONTENTION.
type PlaceHold struct{ User string }

// HoldGrant is what a hold's result says of it.
type HoldGrant struct {
	ID        string
	ExpiresAt time.Time
	Reused    bool
}

// ConfirmHold is a user's confirm of its hold (POST /holds/{id}/confirm).
// OK's Value is ignored. Refusal: HOLD_EXPIRED.
type ConfirmHold struct{ User, Hold string }

// CancelHold is DELETE /holds/{id}: it always succeeds.
type CancelHold struct{ User, Hold string }

// ReadNight is the staff availability of the night (GET
// /hotels/{id}/availability, one room type, one date). OK's Value: a
// NightCounts.
type ReadNight struct{}

// NightCounts is an availability item: unavailableRooms (the confirmed
// stays), heldRooms, availableRooms.
type NightCounts struct{ Reserved, Held, Available int }

func (p PlaceHold) String() string   { return p.User + " holds" }
func (c ConfirmHold) String() string { return c.User + " confirms " + short(c.Hold) }
func (c CancelHold) String() string  { return c.User + " cancels " + short(c.Hold) }
func (ReadNight) String() string     { return "read the night" }
func (g HoldGrant) String() string {
	s := short(g.ID) + " until " + g.ExpiresAt.Format("15:04:05.000000")
	if g.Reused {
		s += " (reused)"
	}
	return s
}
func (n NightCounts) String() string {
	return fmt.Sprintf("reserved %d held %d available %d", n.Reserved, n.Held, n.Available)
}

// short is a hold id's last characters, enough to tell holds apart.
func short(id string) string { return id[max(0, len(id)-6):] }

// nightState is a room type's night: its rooms, the stays confirmed, the
// holds (live or lapsed: a lapsed one counts for nothing), and the decision
// time of the last write placed.
type nightState struct {
	rooms     int
	confirmed []string // the confirmed holds' ids, sorted: each a stay
	holds     []heldRoom
	now       time.Time
}

type heldRoom struct {
	id, user string
	expires  time.Time
}

// counted is how many holds count at t. The night's sorted set scores each
// hold by its expiry in milliseconds and counts those after now's
// millisecond: a hold stops counting at the millisecond it expires in.
func (s nightState) counted(t time.Time) int {
	n := 0
	for _, h := range s.holds {
		if h.expires.UnixMilli() > t.UnixMilli() {
			n++
		}
	}
	return n
}

// free is the rooms a new hold may take at t.
func (s nightState) free(t time.Time) int { return s.rooms - len(s.confirmed) - s.counted(t) }

// live is the hold of id if it is live at t (confirmable: expiry after t).
func (s nightState) live(id string, t time.Time) (int, bool) {
	i := slices.IndexFunc(s.holds, func(h heldRoom) bool { return h.id == id })
	return i, i >= 0 && s.holds[i].expires.After(t)
}

// userHold is the user's live hold at t, if any.
func (s nightState) userHold(user string, t time.Time) (int, bool) {
	i := slices.IndexFunc(s.holds, func(h heldRoom) bool { return h.user == user && h.expires.After(t) })
	return i, i >= 0
}

func (s nightState) stayed(id string) bool {
	_, ok := slices.BinarySearch(s.confirmed, id)
	return ok
}

func (s nightState) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d rooms, %d confirmed, at %s", s.rooms, len(s.confirmed), s.now.Format("15:04:05.000000"))
	for _, h := range s.holds {
		fmt.Fprintf(&b, "; %s holds %s until %s", h.user, short(h.id), h.expires.Format("15:04:05.000000"))
	}
	return b.String()
}

// RoomNight is the model of one night of a room type (stays, docs/stays.md,
// SPEC §4.2): rooms maps each key to the room type's active rooms (no stay
// or hold on the night when the history began); ttl is HOLD_TTL.
//
// Time is part of it. Each write is decided at its batch's time, which
// the apply transaction reads from Postgres' clock after the request was
// accepted, before its outcome is published: a point in the write's
// interval (Postgres runs on the test's machine), later than the last
// write's. A hold's result pins it (createdAt = expiresAt − ttl, for a
// reused hold too); for the others the model takes the earliest time that
// explains the answer. A hold counts against the night until it expires —
// at the millisecond it expires in, as the night's sorted set counts —
// with no sweeper: a hold applied after its expiry does not count, and
// confirming it is HOLD_EXPIRED. Sequentially: a hold by a user with a
// live hold on the night returns that hold with a new expiry (reused);
// otherwise it takes a room if rooms − confirmed − counted holds ≥ 1, else
// NOT_AVAILABLE. A confirm turns a live hold into a stay (confirming it
// again answers the same stay); a hold not live is HOLD_EXPIRED. A cancel
// ends the hold if there is one, and succeeds either way. CONTENTION
// changes nothing.
//
// A read counts the stays and the holds at its own clock, some point of
// its interval (the API's, which is not tied to the writes' clocks): the
// counts must be exact for the state the order gives it at that time. An
// unknown hold is checked as decided at the earliest time the order
// allows, and its id, which no one learnt, is never confirmed.
func RoomNight(rooms map[string]int, ttl time.Duration) porcupine.Model {
	return spec[nightState]{
		init: func(key string) nightState { return nightState{rooms: rooms[key]} },
		step: func(s nightState, c Call, out Outcome) (bool, nightState) { return nightStep(s, c, out, ttl) },
		equal: func(a, b nightState) bool {
			return a.now.Equal(b.now) && slices.Equal(a.confirmed, b.confirmed) && slices.EqualFunc(a.holds, b.holds,
				func(x, y heldRoom) bool { return x.id == y.id && x.user == y.user && x.expires.Equal(y.expires) })
		},
		show: nightState.String,
	}.model()
}

func nightStep(s nightState, c Call, out Outcome, ttl time.Duration) (bool, nightState) {
	if _, ok := c.Op.(ReadNight); ok {
		return readNight(s, c, out), s
	}
	// A write is decided no earlier than the last one, nor than its send.
	at := s.now
	if c.Sent.After(at) {
		at = c.Sent
	}
	if at.After(c.Learnt) {
		return false, s
	}
	switch op := c.Op.(type) {
	case PlaceHold:
		return placeHold(s, op, c, out, at, ttl)
	case ConfirmHold:
		return confirmHold(s, op, c, out, at)
	case CancelHold:
		if i := slices.IndexFunc(s.holds, func(h heldRoom) bool { return h.id == op.Hold }); i >= 0 {
			s.holds = slices.Delete(slices.Clone(s.holds), i, i+1)
		}
		s.now = at
		return out.Status == StatusOK || out.Status == StatusUnknown, s
	}
	return false, s
}

func placeHold(s nightState, op PlaceHold, c Call, out Outcome, at time.Time, ttl time.Duration) (bool, nightState) {
	switch {
	case out.Status == StatusOK:
		g, _ := out.Value.(HoldGrant)
		t := g.ExpiresAt.Add(-ttl) // the batch's time, from its result
		if t.Before(at) || t.After(c.Learnt) {
			return false, s
		}
		return grant(s, op.User, g.ID, t, ttl, g.Reused)
	case out.Status == StatusUnknown:
		id := fmt.Sprintf("unknown-%d", c.Sent.UnixNano())
		i, reused := s.userHold(op.User, at)
		switch {
		case reused:
			id = s.holds[i].id
		case s.free(at) < 1:
			s.now = at
			return true, s
		}
		return grant(s, op.User, id, at, ttl, reused)
	case out.Code == domain.CodeNotAvailable:
		// The earliest time the user has no live hold (else it is reused).
		if i, ok := s.userHold(op.User, at); ok {
			at = s.holds[i].expires
		}
		s.now = at
		return !at.After(c.Learnt) && s.free(at) < 1, s
	case out.Code == domain.CodeContention:
		s.now = at
		return true, s
	}
	return false, s
}

// grant places the hold id of user decided at t: a new one, or the user's
// live one again (reused) with its expiry pushed back.
func grant(s nightState, user, id string, t time.Time, ttl time.Duration, reused bool) (bool, nightState) {
	i, has := s.userHold(user, t)
	switch {
	case reused != has, reused && s.holds[i].id != id, !reused && s.free(t) < 1:
		return false, s
	}
	s.holds = slices.Clone(s.holds)
	if reused {
		s.holds[i].expires = t.Add(ttl)
	} else {
		s.holds = append(s.holds, heldRoom{id: id, user: user, expires: t.Add(ttl)})
	}
	s.now = t
	return true, s
}

func confirmHold(s nightState, op ConfirmHold, c Call, out Outcome, at time.Time) (bool, nightState) {
	if s.stayed(op.Hold) { // confirmed before: the same stay again
		s.now = at
		return out.Status == StatusOK || out.Status == StatusUnknown, s
	}
	i, live := s.live(op.Hold, at)
	switch {
	case live && (out.Status == StatusOK || out.Status == StatusUnknown):
		j, _ := slices.BinarySearch(s.confirmed, op.Hold)
		s.confirmed = slices.Insert(slices.Clone(s.confirmed), j, op.Hold)
		s.holds = slices.Delete(slices.Clone(s.holds), i, i+1)
		s.now = at
		return true, s
	case out.Code == domain.CodeHoldExpired || out.Status == StatusUnknown:
		if live { // the earliest time it is not
			at = s.holds[i].expires
		}
		s.now = at
		return !at.After(c.Learnt), s
	}
	return false, s
}

// readNight reports whether some time of the read's interval gives its
// counts.
func readNight(s nightState, c Call, out Outcome) bool {
	if out.Status == StatusUnknown {
		return true
	}
	v, ok := out.Value.(NightCounts)
	if out.Status != StatusOK || !ok || v.Reserved != len(s.confirmed) {
		return false
	}
	// The count changes only where a hold stops counting.
	times := []time.Time{c.Sent}
	for _, h := range s.holds {
		if e := time.UnixMilli(h.expires.UnixMilli()); e.After(c.Sent) && !e.After(c.Learnt) {
			times = append(times, e)
		}
	}
	for _, t := range times {
		if held := s.counted(t); held == v.Held && v.Available == max(0, s.rooms-len(s.confirmed)-held) {
			return true
		}
	}
	return false
}
