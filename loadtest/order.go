package loadtest

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// orderBook records, for each FCFS request, when its client sent it, when
// the client had its 202, and what it got. It checks holdfast's order
// guarantee for one key (README "Order"): if a request's 202 reached its
// client before another request was sent, the first is applied first. For
// FCFS that means the first gets a lower seat, or the later one is
// SOLD_OUT. Requests that overlap in time have no order between them, and
// the checker draws no conclusion from them.
type orderBook struct {
	mu      sync.Mutex
	entries []ordered
}

// OrderReport is what the order check found.
type OrderReport struct {
	PairsChecked int64 `json:"pairsChecked"` // real-time-ordered pairs whose second got a seat
	OutOfOrder   int   `json:"outOfOrder"`
}

type ordered struct {
	user        string
	sent, acked time.Time
	seat        int64 // 0: none
	soldOut     bool
}

func (o *orderBook) add(e ordered) {
	o.mu.Lock()
	o.entries = append(o.entries, e)
	o.mu.Unlock()
}

// violations returns the real-time-ordered pairs applied out of order (at
// most 20), how many such pairs there were in all, and how many
// real-time-ordered pairs with a seat second it checked.
func (o *orderBook) violations() (out []string, pairs int, checked int64) {
	o.mu.Lock()
	entries := append([]ordered(nil), o.entries...)
	o.mu.Unlock()
	byAck := make([]ordered, 0, len(entries))
	for _, e := range entries {
		if e.seat > 0 || e.soldOut {
			byAck = append(byAck, e)
		}
	}
	sort.Slice(byAck, func(i, j int) bool { return byAck[i].acked.Before(byAck[j].acked) })
	// highest[k] is the entry with the highest seat among the first k
	// acknowledged, firstSoldOut[k] the first of them told SOLD_OUT.
	highest := make([]int, len(byAck)+1)
	firstSoldOut := make([]int, len(byAck)+1)
	highest[0], firstSoldOut[0] = -1, -1
	for k, e := range byAck {
		highest[k+1], firstSoldOut[k+1] = highest[k], firstSoldOut[k]
		if e.seat > 0 && (highest[k] < 0 || e.seat > byAck[highest[k]].seat) {
			highest[k+1] = k
		}
		if e.soldOut && firstSoldOut[k] < 0 {
			firstSoldOut[k+1] = k
		}
	}
	for _, b := range byAck {
		if b.seat == 0 {
			continue
		}
		// The requests acknowledged before b was sent must all have been
		// applied before it.
		k := sort.Search(len(byAck), func(i int) bool { return !byAck[i].acked.Before(b.sent) })
		checked += int64(k)
		if h := highest[k]; h >= 0 && byAck[h].seat > b.seat {
			pairs++
			if len(out) < 20 {
				out = append(out, fmt.Sprintf("out of order: %s had its 202 before %s sent its request, but got seat %d against its %d",
					byAck[h].user, b.user, byAck[h].seat, b.seat))
			}
		} else if s := firstSoldOut[k]; s >= 0 {
			pairs++
			if len(out) < 20 {
				out = append(out, fmt.Sprintf("out of order: %s had its 202 before %s sent its request, but was told SOLD_OUT while it got seat %d",
					byAck[s].user, b.user, b.seat))
			}
		}
	}
	return out, pairs, checked
}
