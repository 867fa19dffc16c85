package loadtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The waiting-room checks find what they look for: tokens over the cap,
// admissions over the rate, a present user never admitted, and one
// overtaken; and they pass a run that kept to all of it.
func TestWaitingRoomChecks(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	visit := func(user string, sent, granted, released float64) *roomVisit {
		v := &roomVisit{user: user, sent: at(sent), entered: at(sent + 0.01)}
		if granted >= 0 {
			v.granted, v.seen, v.expires = at(granted), at(granted+0.01), at(granted+60)
			v.released = at(released)
		}
		return v
	}
	room := func(max, perMinute int, vs ...*roomVisit) *waitingRoomRush {
		return &waitingRoomRush{maxConcurrent: max, perMinute: perMinute, visits: vs}
	}

	ok := room(2, 3, visit("a", 0, 1, 2), visit("b", 0.1, 1, 3), visit("c", 0.2, 2, 4))
	require.Empty(t, ok.checkCaps())
	require.Empty(t, ok.checkOrder(nil))

	require.Equal(t, []string{"3 entry tokens valid at once, maxConcurrent is 2"},
		room(2, 0, visit("a", 0, 1, 5), visit("b", 0.1, 2, 5), visit("c", 0.2, 3, 5)).checkCaps())
	require.Equal(t, []string{"4 admissions within 60 s, admitPerMinute is 3"},
		room(9, 3, visit("a", 0, 1, 2), visit("b", 0.1, 20, 21), visit("c", 0.2, 40, 41), visit("d", 0.3, 60.9, 61)).checkCaps())
	require.Empty(t, room(9, 3, visit("a", 0, 1, 2), visit("b", 0.1, 20, 21), visit("c", 0.2, 40, 41), visit("d", 0.3, 61, 62)).checkCaps(),
		"the first admission left the window as the fourth came")

	require.Equal(t, []string{"1 users who stayed present were never admitted"},
		room(1, 0, visit("a", 0, 1, 2), visit("b", 1, -1, 0)).checkOrder(nil))
	// With one slot, c (sent after a's and b's 202s) got in while both
	// still waited, and then b while a did: two overtook. Concurrent entries
	// (sent before the other's 202) have no order, so d and e may go either
	// way.
	require.Equal(t, []string{"2 present users were admitted while 1 or more present users ahead of them still waited"},
		room(1, 0, visit("a", 0, 5, 6), visit("b", 1, 3, 4), visit("c", 2, 1, 2)).checkOrder(nil))
	require.Empty(t, room(1, 0, visit("d", 0, 3, 4), visit("e", 0.005, 1, 2)).checkOrder(nil))
	// In the pre-queue the shuffle's places say who is ahead.
	p, q := visit("p", 0, 1, 2), visit("q", 0, 3, 4)
	p.prequeue, q.prequeue = true, true
	require.Empty(t, room(1, 0, p, q).checkOrder(map[string]int{"p": 0, "q": 1}))
	require.Len(t, room(1, 0, p, q).checkOrder(map[string]int{"p": 1, "q": 0}), 1)
	late := visit("late", 10, 0.5, 0.6) // came after the start, admitted before a pre-queue user
	require.Len(t, room(1, 0, p, q, late).checkOrder(map[string]int{"p": 0, "q": 1}), 1)
}
