package storage

import (
	"context"
	"fmt"
	"time"
)

// GroupRead answers concurrent reads of single keys with one read of many:
// while one read runs, the keys asked for meanwhile gather, and the next
// read takes them all (up to max), with the same turns the Batcher takes.
// It costs nothing when calls come one at a time: a caller with no read in
// flight reads at once.
//
// A caller's answer always comes from a read that began after it called
// Get, so it sees every write that finished before that call. A read that
// fails answers every caller waiting meanwhile with its error at once: with
// the store down, theirs would fail too, each after a timeout of its own.
type GroupRead[K comparable, V any] struct {
	read    func(ctx context.Context, keys []K) (map[K]V, error)
	timeout time.Duration
	turns   Turns[*groupCall[K, V]]
}

type groupCall[K comparable, V any] struct {
	ctx context.Context
	key K
	val V
	err error
}

// NewGroupRead reads with read, which returns the value of each key it
// found (a key it did not find gets V's zero value), at most max keys a
// read (at least 1), each read bounded by timeout.
func NewGroupRead[K comparable, V any](read func(ctx context.Context, keys []K) (map[K]V, error), max int, timeout time.Duration) *GroupRead[K, V] {
	g := &GroupRead[K, V]{read: read, timeout: timeout}
	g.turns.Max = max
	if max < 1 {
		g.turns.Max = 1
	}
	return g
}

// Get returns key's value from a read that began after this call.
func (g *GroupRead[K, V]) Get(ctx context.Context, key K) (V, error) {
	c := &groupCall[K, V]{ctx: ctx, key: key}
	g.turns.Take(c, g.readAll)
	return c.val, c.err
}

// readAll reads batch's keys and answers each call. A read that panics
// fails the batch (and the waiters) like a read that errs.
func (g *GroupRead[K, V]) readAll(batch []*groupCall[K, V]) {
	// The read serves every caller in the batch: one caller going away
	// must not cut it short for the others; but it ends by the earliest
	// caller's deadline, as a Batcher's round trip does.
	ctx, cancel := earliestDeadline(batch, func(c *groupCall[K, V]) context.Context { return c.ctx })
	defer cancel()
	ctx, cancelRead := context.WithTimeout(ctx, g.timeout)
	defer cancelRead()
	keys := make([]K, len(batch))
	for i, c := range batch {
		keys[i] = c.key
	}
	vals, err := g.safeRead(ctx, keys)
	for _, c := range batch {
		c.val, c.err = vals[c.key], err
	}
	if err != nil {
		g.turns.dismiss(func(c *groupCall[K, V]) { c.err = err })
	}
}

func (g *GroupRead[K, V]) safeRead(ctx context.Context, keys []K) (vals map[K]V, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("storage: group read: panic: %v", p)
		}
	}()
	return g.read(ctx, keys)
}
