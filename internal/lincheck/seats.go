package lincheck

import (
	"fmt"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/holdfast/holdfast/domain"
)

// The first-come-first-served operations on one event (the key).

// Grab is a user's FCFS grab (POST /events/{id}/seats/fcfs). OK's Value:
// the seat id (an int64). Refusals: SOLD_OUT; ALREADY_RESERVED with the
// seat id its meta names (an int64, or nil if it named none); CONTENTION.
type Grab struct{ User string }

// ListSeats is GET /events/{id}/seats?status=available. OK's Value: the
// listed seat ids in the listed order (an []int64).
type ListSeats struct{}

func (g Grab) String() string    { return g.User + " grabs" }
func (ListSeats) String() string { return "list free seats" }

// seatsState is an event's seats, the first taken of them given, and who
// holds which.
type seatsState struct {
	seats   []int64 // the event's seats in id order, shared by every state of the key
	taken   int
	holders []holder // sorted by user
}

type holder struct {
	user string
	seat int64
}

func (s seatsState) find(user string) (int, bool) {
	return slices.BinarySearchFunc(s.holders, user, func(h holder, u string) int { return strings.Compare(h.user, u) })
}

func (s seatsState) String() string {
	return fmt.Sprintf("%d of %d seats given, next %s", s.taken, len(s.seats), s.next())
}

func (s seatsState) next() string {
	if s.taken == len(s.seats) {
		return "none"
	}
	return fmt.Sprint(s.seats[s.taken])
}

// FCFS is the model of an event's first-come-first-served seats
// (docs/events.md, SPEC §6): seats maps each key to the event's seat ids
// (none taken when the history began).
//
// Sequentially: a grab by a user who holds no seat takes the free seat of
// lowest id (SPEC §6: allocation order is seat id order; seats are never
// given back), or is SOLD_OUT when none is left; a user who holds one is
// ALREADY_RESERVED, naming it. CONTENTION (the request waited longer than
// FCFS_LOCK_WAIT) is allowed only where the grab would have had a seat,
// as the worker decides it, and changes nothing. The seat list is one
// Postgres statement: exactly the free seats, in id order.
//
// The public remainingSeats count is not modelled: it is a Redis copy set
// after each commit and by the periodic recount (events.Counts), which the
// documentation does not promise to be current.
func FCFS(seats map[string][]int64) porcupine.Model {
	return spec[seatsState]{
		init: func(key string) seatsState {
			ids := slices.Clone(seats[key])
			slices.Sort(ids)
			return seatsState{seats: ids}
		},
		step: seatsStep,
		equal: func(a, b seatsState) bool {
			return a.taken == b.taken && slices.Equal(a.holders, b.holders)
		},
		show: seatsState.String,
	}.model()
}

func seatsStep(s seatsState, c Call, out Outcome) (bool, seatsState) {
	switch op := c.Op.(type) {
	case Grab:
		i, holds := s.find(op.User)
		free := s.taken < len(s.seats)
		switch {
		case out.Status == StatusOK:
			if holds || !free || out.Value != s.seats[s.taken] {
				return false, s
			}
		case out.Status == StatusUnknown:
			if holds || !free {
				return true, s
			}
		case out.Code == domain.CodeAlreadyReserved:
			return holds && (out.Value == nil || out.Value == s.holders[i].seat), s
		case out.Code == domain.CodeSoldOut:
			return !holds && !free, s
		case out.Code == domain.CodeContention:
			return !holds && free, s
		default:
			return false, s
		}
		s.holders = slices.Insert(slices.Clone(s.holders), i, holder{op.User, s.seats[s.taken]})
		s.taken++
		return true, s
	case ListSeats:
		list, _ := out.Value.([]int64)
		return out.Status == StatusUnknown || (out.Status == StatusOK && slices.Equal(list, s.seats[s.taken:])), s
	}
	return false, s
}
