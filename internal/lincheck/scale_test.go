package lincheck

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
)

// simulated is a history made by clients that each send one operation at a
// time, every operation taking effect at a random point of its interval:
// linearizable by construction. apply gives an operation's outcome on the
// state at that point.
func simulated(seed uint64, clients, perClient int, keys []string, next func(r *rand.Rand, client, n int) any,
	apply func(key string, op any) Outcome) *Recorder {
	r := rand.New(rand.NewPCG(seed, 0))
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	type pending struct {
		client     int
		key        string
		op         any
		sent, took time.Time
		learnt     time.Time
	}
	var all []pending
	for c := range clients {
		at := t0.Add(time.Duration(r.IntN(1000)) * time.Microsecond)
		for n := range perClient {
			d := time.Duration(200+r.IntN(5000)) * time.Microsecond
			p := pending{client: c, key: keys[r.IntN(len(keys))], op: next(r, c, n), sent: at, learnt: at.Add(d)}
			p.took = at.Add(time.Duration(r.Int64N(int64(d))))
			all = append(all, p)
			at = p.learnt.Add(time.Duration(r.IntN(300)) * time.Microsecond)
		}
	}
	slices.SortFunc(all, func(a, b pending) int { return a.took.Compare(b.took) })
	rec := NewRecorder()
	for _, p := range all {
		rec.RecordAt(p.client, p.key, p.sent, p.learnt, p.op, apply(p.key, p.op))
	}
	return rec
}

// Histories of 2,000 operations on two hot keys, 20 clients at once (10 a
// key, every operation overlapping others), check within the recorder's
// timeout (an unknown verdict would fail the test that records them); a
// history with one answer changed is rejected. Porcupine's search grows
// steeply with the clients acting on one key at once: with 30 clients
// (3,000 operations) the stock history took 17.6 million model steps and
// 8–14 s, with 40 it did not end in 30 s (2026-11-29, without -race).
func TestThousandsOfOperationsOnHotKeys(t *testing.T) {
	const clients, perClient = 20, 100
	keys := []string{"events:1", "events:2"}
	seats := map[string][]int64{}
	for k, key := range keys {
		for s := range 1500 {
			seats[key] = append(seats[key], int64(k*10000+s+1))
		}
	}
	taken := map[string]int{}
	holders := map[string]int64{}
	grab := func(key string, op any) Outcome {
		switch op := op.(type) {
		case Grab:
			if s, ok := holders[key+op.User]; ok {
				return Refused(domain.CodeAlreadyReserved, s)
			}
			if taken[key] == len(seats[key]) {
				return Refused(domain.CodeSoldOut, nil)
			}
			s := seats[key][taken[key]]
			taken[key]++
			holders[key+op.User] = s
			return OK(s)
		}
		return OK(slices.Clone(seats[key][taken[key]:]))
	}
	rec := simulated(1, clients, perClient, keys, func(r *rand.Rand, c, n int) any {
		if r.IntN(5) == 0 {
			return ListSeats{}
		}
		return Grab{User: fmt.Sprintf("u%d-%d", c, r.IntN(n+1))}
	}, grab)
	require.Equal(t, clients*perClient, rec.Len())
	m := FCFS(seats)
	began := time.Now()
	require.Equal(t, porcupine.Ok, rec.Verdict(m))
	t.Logf("fcfs: %d operations checked in %s", rec.Len(), time.Since(began).Round(time.Millisecond))

	// One grab's seat changed to the next one's: rejected.
	ops := rec.Operations()
	bad := NewRecorder()
	changed := false
	for _, op := range ops {
		c, o := op.Input.(Call), op.Output.(Outcome)
		if s, ok := o.Value.(int64); ok && o.Status == StatusOK && !changed {
			o.Value, changed = s+1, true
		}
		bad.RecordAt(op.ClientId, c.Key, c.Sent, c.Learnt, c.Op, o)
	}
	began = time.Now()
	require.Equal(t, porcupine.Illegal, bad.Verdict(m))
	t.Logf("fcfs, one seat changed: rejected in %s", time.Since(began).Round(time.Millisecond))

	stock := map[string]int{"shop:opt:1": 3000, "shop:opt:2": 3000}
	units := map[string]int{"shop:opt:1": 3000, "shop:opt:2": 3000}
	reserved := map[string]int{}
	held := map[string]int{}
	shop := func(key string, op any) Outcome {
		switch op := op.(type) {
		case Reserve:
			switch available := units[key] - reserved[key]; {
			case held[key+op.User] > 0:
				return Refused(domain.CodeDuplicateReservation, nil)
			case available < op.Units:
				return Refused(domain.CodeInsufficientStock, nil)
			default:
				held[key+op.User] = op.Units
				reserved[key] += op.Units
				return OK(available - op.Units)
			}
		case Confirm:
			q := held[key+op.User]
			if q == 0 {
				return Refused(domain.CodeReservationNotFound, nil)
			}
			units[key] -= q
			reserved[key] -= q
			delete(held, key+op.User)
			return OK(q)
		case Release:
			q := held[key+op.User]
			reserved[key] -= q
			delete(held, key+op.User)
			return OK(min(q, 1))
		}
		return OK(StockLevel{Stock: units[key], Reserved: reserved[key], Available: units[key] - reserved[key]})
	}
	rec = simulated(2, clients, perClient, []string{"shop:opt:1", "shop:opt:2"}, func(r *rand.Rand, c, n int) any {
		user := fmt.Sprint("u", c)
		switch n % 4 {
		case 0:
			return Reserve{User: user, Units: 1 + r.IntN(3)}
		case 1:
			if r.IntN(2) == 0 {
				return Confirm{User: user}
			}
			return Release{User: user}
		}
		return ReadStock{}
	}, shop)
	began = time.Now()
	require.Equal(t, porcupine.Ok, rec.Verdict(Stock(stock)))
	t.Logf("stock: %d operations checked in %s", rec.Len(), time.Since(began).Round(time.Millisecond))
}
