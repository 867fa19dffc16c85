package storage

import "sync"

// Turns is the turn-taking that Batcher, GroupRead and the intake's group
// commit share: one batch of callers' work is in flight at a time; callers
// that arrive meanwhile queue, and the first of them leads the next batch
// with the others queued by then (at most Max in a batch; 0: no bound). A
// lone caller goes at once. A leader hands its place on once its batch has
// run, so no caller runs more than its own batch. The zero value is ready.
type Turns[T any] struct {
	Max   int
	mu    sync.Mutex
	busy  bool // a batch is in flight, or about to be
	queue []*turn[T]
}

type turn[T any] struct {
	item T
	lead chan bool // true: lead the next batch; false: done
}

// Take returns once the batch holding item has run; run runs a batch, the
// caller's own item first when the caller leads it. If run panics, the
// batch's other callers are woken all the same, the lead is handed on, and
// the panic goes on in the leader's goroutine.
func (t *Turns[T]) Take(item T, run func(batch []T)) {
	me := &turn[T]{item: item, lead: make(chan bool, 1)}
	t.mu.Lock()
	if t.busy {
		t.queue = append(t.queue, me)
		t.mu.Unlock()
		if !<-me.lead {
			return
		}
		t.mu.Lock() // handed the lead: busy stays set for us
	}
	t.busy = true
	n := len(t.queue)
	if t.Max > 0 {
		n = min(n, t.Max-1)
	}
	batch := append([]*turn[T]{me}, t.queue[:n]...)
	t.queue = t.queue[n:]
	t.mu.Unlock()

	defer t.handOff(batch)
	items := make([]T, len(batch))
	for i, c := range batch {
		items[i] = c.item
	}
	run(items)
}

// handOff wakes batch's callers but its leader (batch[0]) and passes the
// lead to the first caller queued meanwhile, if any.
func (t *Turns[T]) handOff(batch []*turn[T]) {
	t.mu.Lock()
	var next *turn[T]
	if len(t.queue) > 0 {
		next, t.queue = t.queue[0], t.queue[1:]
	} else {
		t.busy = false
	}
	t.mu.Unlock()
	for _, c := range batch[1:] {
		c.lead <- false
	}
	if next != nil {
		next.lead <- true
	}
}

// dismiss ends the turns of every caller queued now, each after done has
// been applied to its item: for a failure that would fail their batches
// too. Called from run, so the lead is still held.
func (t *Turns[T]) dismiss(done func(T)) {
	t.mu.Lock()
	queued := t.queue
	t.queue = nil
	t.mu.Unlock()
	for _, c := range queued {
		done(c.item)
		c.lead <- false
	}
}
