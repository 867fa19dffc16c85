package storage

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// GroupRead answers concurrent reads of single keys with one read of many:
// while one read runs, the keys asked for meanwhile gather, and the next
// read takes them all (up to max). As the intake's group commit does for
// writes, it costs nothing when calls come one at a time: a caller with no
// read in flight reads at once.
//
// A caller's answer always comes from a read that began after it called
// Get, so it sees every write that finished before that call.
type GroupRead[K comparable, V any] struct {
	read    func(ctx context.Context, keys []K) (map[K]V, error)
	max     int
	timeout time.Duration
	mu      sync.Mutex
	busy    bool // a read is in flight, or about to be
	queue   []*groupCall[K, V]
}

type groupCall[K comparable, V any] struct {
	key  K
	val  V
	err  error
	wake chan bool // true: val and err are set; false: lead the next read
}

// NewGroupRead reads with read, which returns the value of each key it
// found (a key it did not find gets V's zero value), at most max keys a
// read (at least 1), each read bounded by timeout.
func NewGroupRead[K comparable, V any](read func(ctx context.Context, keys []K) (map[K]V, error), max int, timeout time.Duration) *GroupRead[K, V] {
	if max < 1 {
		max = 1
	}
	return &GroupRead[K, V]{read: read, max: max, timeout: timeout}
}

// Get returns key's value from a read that began after this call.
func (g *GroupRead[K, V]) Get(ctx context.Context, key K) (V, error) {
	c := &groupCall[K, V]{key: key, wake: make(chan bool, 1)}
	g.mu.Lock()
	if g.busy {
		g.queue = append(g.queue, c)
		g.mu.Unlock()
		if <-c.wake {
			return c.val, c.err
		}
		g.mu.Lock() // woken to lead: busy stays set for us
	} else {
		g.busy = true
	}
	batch := []*groupCall[K, V]{c}
	n := min(len(g.queue), g.max-1)
	batch = append(batch, g.queue[:n]...)
	g.queue = g.queue[n:]
	g.mu.Unlock()

	err := g.readAll(ctx, batch)

	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		// The store failed: so would the next read, so every waiter gets
		// this answer now rather than a read's timeout each, one after
		// another.
		for _, w := range g.queue {
			w.err = err
			w.wake <- true
		}
		g.queue, g.busy = nil, false
		return c.val, c.err
	}
	// Hand the lead to the first waiter, if any, and return: a leader
	// never reads for others after its own answer.
	if len(g.queue) > 0 {
		next := g.queue[0]
		g.queue = g.queue[1:]
		next.wake <- false
	} else {
		g.busy = false
	}
	return c.val, c.err
}

// readAll reads batch's keys and answers every call in it but the first
// (the leader's, whose caller reads its own answer). A read that panics
// fails the batch, so the lead is still handed on.
func (g *GroupRead[K, V]) readAll(ctx context.Context, batch []*groupCall[K, V]) (err error) {
	// The read serves every caller in the batch: one caller going away
	// must not cut it short for the others.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
	defer cancel()
	keys := make([]K, len(batch))
	for i, c := range batch {
		keys[i] = c.key
	}
	var vals map[K]V
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("storage: group read: panic: %v", p)
			}
		}()
		vals, err = g.read(ctx, keys)
	}()
	for i, c := range batch {
		c.val, c.err = vals[c.key], err
		if i > 0 {
			c.wake <- true
		}
	}
	return err
}
