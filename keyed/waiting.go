package keyed

import (
	"slices"
	"strings"
	"sync"
)

// Quiet waiting, a throughput mechanism outside the protocol (doc.go). A
// drain whose requests wait for keys other drains hold (doc.go, "Groups")
// looks again every few milliseconds. Two things make those looks cheap
// and the wait short:
//
//   - a look that sees what the last idle step saw (the same keys held, the
//     same requests in their windows) reuses that step's plan: it tries the
//     wanted keys again, and makes room or yields as that step would have,
//     without Postgres. The pick would be the same: only the group's own
//     apply completes a request in its windows, a request added to them
//     changes what the look sees, and one added again only narrows what a
//     window covers. An idle step would otherwise run an apply transaction
//     that locks the rows of every open request in its windows, and so
//     does the drain that holds the key they wait for, in each of its steps.
//     One case costs a wait: a holder that stalled past its lease and still
//     committed (K2 allows it until the next holder commits) and then failed
//     to remove its applied entries leaves a terminal one in the windows;
//     a whole step drops it, a quiet look does not, so the drain waits until
//     its keys change or its slice ends (DrainSlice);
//   - a drain that yields a key kept for the holder of another wakes that
//     holder at once if it is a drain of the same engine (a worker has one),
//     instead of leaving it to look again up to 20 ms later. A hand-off, or
//     a key released with its mailbox empty, wakes nobody. Waking the drains
//     of other workers too, through Redis pub/sub, was tried and not kept
//     (docs/benchmarks.md, "A shared key that sorts after").
//
// Both matter where requests share a key that sorts after keys of their
// own: the shared key goes from drain to drain, a few requests each time,
// and each hand costs a wait. Measured (BenchmarkBatchApply, the case
// keys=24+shared-last/drains=8 against its plain-waiting twin, 400
// requests, 2026-11-27): 173–305 requests a second against 90–135 in
// seven runs of both; run alternately, 234 / 250 / 239 against 117 / 88 /
// 111 / 91 / 95 / 96 (2.4× on the means). Waking alone gave 188 against
// 120; skipping Postgres alone, 126–136 against 77–110. A hand still costs
// an apply transaction (about 10 ms here), so this case stays well below
// the one where the shared key sorts first (966–1,619 a second):
// docs/benchmarks.md says why.
//
// Options.PlainWaiting (QUIET_WAITING=false) turns both off: every look is
// a whole step, on its timer alone. Neither is needed for K1–K6: the looks
// go on either way, so a wake that is lost, or a yield by a drain of
// another worker, costs only the wait.

// quiet is the last step of a group that applied nothing: what it saw and
// what it planned. A nil *quiet is waiting plain.
type quiet struct {
	sig  string
	plan plan
}

func (e *Engine) newQuiet() *quiet {
	if e.opt.PlainWaiting {
		return nil
	}
	return &quiet{}
}

// unchanged reports whether a step that holds keys and sees merged in their
// windows sees what the last idle step saw, and returns that step's plan.
func (q *quiet) unchanged(keys []string, merged []entry) (plan, bool) {
	if q == nil || q.sig == "" || q.sig != signature(keys, merged) {
		return plan{}, false
	}
	return q.plan, true
}

// stepped records a step that ran its apply transaction: what it saw and
// planned if it applied nothing, or that the group moved on.
func (q *quiet) stepped(keys []string, merged []entry, p plan, applied bool) {
	if q == nil {
		return
	}
	q.sig, q.plan = "", plan{}
	if !applied {
		q.sig, q.plan = signature(keys, merged), p
	}
}

// signature names what a step sees: the keys held and the requests in
// their windows.
func signature(keys []string, merged []entry) string {
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
	}
	for _, m := range merged {
		b.WriteByte(1)
		b.WriteString(m.id)
	}
	return b.String()
}

// wakers are the drains of an engine that wait for keys, by the keys
// they held when they began to wait. It is bounded by live work: a drain
// is in it only while it waits, under at most maxGroupKeys keys.
type wakers struct {
	mu sync.Mutex
	by map[string]chan struct{}
}

// wake wakes the drain of this engine that waits holding key, if any.
func (ws *wakers) wake(key string) {
	ws.mu.Lock()
	ch := ws.by[key]
	ws.mu.Unlock()
	select {
	case ch <- struct{}{}:
	default: // none, or woken already
	}
}

// waiter is one drain's registration with its engine's wakers.
type waiter struct {
	ws   *wakers // nil when waiting plain
	ch   chan struct{}
	keys []string
}

func (e *Engine) newWaiter() *waiter {
	if e.opt.PlainWaiting {
		return &waiter{}
	}
	return &waiter{ws: &e.wakers, ch: make(chan struct{}, 1)}
}

// wait registers the drain under keys, the ones its group holds now, and
// returns the channel a wake arrives on (nil, which never delivers, when
// waiting plain). The drain stays registered until done, so a key given up
// for it while it looks again still wakes it; a look that holds the keys it
// is registered under leaves the registry as it is.
func (w *waiter) wait(keys []string) <-chan struct{} {
	if w.ws == nil || slices.Equal(keys, w.keys) {
		return w.ch
	}
	w.ws.mu.Lock()
	defer w.ws.mu.Unlock()
	w.unregister()
	if w.ws.by == nil {
		w.ws.by = map[string]chan struct{}{}
	}
	for _, k := range keys {
		w.ws.by[k] = w.ch
	}
	w.keys = keys
	return w.ch
}

// done removes the registration: the drain made progress, or ends.
func (w *waiter) done() {
	if w.ws == nil || w.keys == nil {
		return
	}
	w.ws.mu.Lock()
	defer w.ws.mu.Unlock()
	w.unregister()
}

// unregister is done with the wakers' lock held.
func (w *waiter) unregister() {
	for _, k := range w.keys {
		if w.ws.by[k] == w.ch {
			delete(w.ws.by, k)
		}
	}
	w.keys = nil
}
