package keyed

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/holdfast/holdfast/requests"
)

// Quiet waiting, a throughput mechanism outside the protocol (doc.go). A
// drain whose requests wait for keys other drains hold (doc.go, "Groups")
// looks again every few milliseconds, parked in between. Three things make
// those looks cheap and the wait short:
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
//     (docs/benchmarks.md, "A shared key that sorts after");
//   - a drain that would yield keys for a request whose smallest key a drain
//     of the same engine holds gives that drain its whole group instead
//     (giveAway), and ends; the other merges it at the start of its next
//     step (receive). Requests that share a key sorting after keys of their
//     own (a cart of a long-tail option and a hot one) are each gathered by
//     the drain of their own key, which waits for the shared one: its holder
//     used to yield it to each in turn, one transaction a hand. Where they
//     share several hot keys (carts of one or two of five hot options), the
//     drains of one worker that hold hot keys each meet requests whose
//     smallest key another holds: they yielded keys to each other at every
//     step, and a rush ran at 60% of the rate without the tail. Given away,
//     their groups become one.
//
// Why giving away keeps the protocol's guarantees. The leases move between
// two groups in the process, never released: no other drain can take a key
// meanwhile, and the tokens, hence the fences, are the ones they were (K2).
// They wait in the receiver's inbox until its next step merges them, before
// it peeks (which extends them); only the receiver's own drain touches its
// group, so one group only ever uses a lease. A drain closes its inbox,
// under its lock, as its group empties or it hands its keys on (leave),
// taking in what came before: a gift after that is refused and stays with
// its giver, which yields as before, so nothing is left in an inbox nobody
// reads. A giver closes its own inbox first and gives only with it empty,
// so of two drains that give to each other at once at most one gives. A
// gift makes one group of two and ends the giver, so gifts cannot go round
// in a circle. Every key stays held throughout, so doc.go's argument that
// someone always goes on holds of the merged group as of the two: it holds
// every smallest key either held. The receiver holds the smallest key the
// giver yielded for, as the registry last saw it; if it let that key go
// since, the request is gathered by whoever holds it, as after a yield. A
// gift that would leave no room for a request's keys (roomFor), by the keys
// the receiver is registered under, is not made.
//
// Measured (2026-11-28). A cart rush whose every cart also holds one of 200
// long-tail options (scripts/ab.sh, load -cart-tail 200, 40,000 carts, two
// pairs): 1,659 and 1,529 carts a second against 1,341 and 1,240 before
// (c1ee839, which took parked drains over instead), at 0.90 and 0.97 ms
// of CPU a journey against 1.16 and 1.23; keys yielded with requests left,
// 778 against 16,921. Taking parked drains over, kept beside the gifts, no
// longer paid: BenchmarkBatchApply's case keys=24+shared-last/drains=8
// (three runs of each, alternating) 933 / 809 / 927 requests a second with
// it, 875 / 900 / 928 without; TestMultiKeyAcceptanceOrder, from the last
// 202 to the last outcome, 0.32 / 1.80 / 0.32 / 0.36 s against 0.42 / 0.34
// / 0.47 / 0.37; the cart rush above, 1,445 / 1,620 against 1,636 / 1,246.
// It was removed. docs/benchmarks.md has these and the earlier steps.
//
// Options.PlainWaiting (QUIET_WAITING=false) turns all three off: every
// look is a whole step, on its timer alone, and keys move between drains
// through Redis only. None is needed for K1–K6: the looks go on either way,
// so a wake that is lost, a gift refused or a yield by a drain of another
// worker costs only the wait.

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

// wakers are the drains of an engine, by the keys they held at the end of
// their last step. It is bounded by live work: a drain is in it only while
// it runs, under at most maxGroupKeys keys.
type wakers struct {
	mu sync.Mutex
	by map[string]*waiter
}

// wake wakes the drain of this engine that waits holding key, if any.
func (ws *wakers) wake(key string) {
	ws.mu.Lock()
	w := ws.by[key]
	ws.mu.Unlock()
	if w != nil {
		w.wake()
	}
}

// waiter is one drain's registration with its engine's wakers.
type waiter struct {
	ws    *wakers // nil when waiting plain
	ch    chan struct{}
	queue string
	keys  []string

	mu sync.Mutex
	// inbox holds the leases of groups given to this drain (giveAway) that
	// it has not merged yet; once closed it takes no more.
	inbox  []Lease
	closed bool
}

func (e *Engine) newWaiter(queue string) *waiter {
	if e.opt.PlainWaiting {
		return &waiter{queue: queue}
	}
	return &waiter{ws: &e.wakers, ch: make(chan struct{}, 1), queue: queue}
}

// track registers the drain under the keys g holds now; a drain that holds
// the keys it is registered under leaves the registry as it is. A drain
// is registered from its first step until done.
func (w *waiter) track(g *group) {
	keys := g.keys()
	if w.ws == nil || slices.Equal(keys, w.keys) {
		return
	}
	w.ws.mu.Lock()
	defer w.ws.mu.Unlock()
	w.unregister()
	if w.ws.by == nil {
		w.ws.by = map[string]*waiter{}
	}
	for _, k := range keys {
		w.ws.by[k] = w
	}
	w.keys = keys
}

// park registers the drain under the keys g holds now (track) and
// returns the channel a wake arrives on (nil, which never delivers, when
// waiting plain).
func (w *waiter) park(g *group) <-chan struct{} {
	if w.ws == nil {
		return nil
	}
	w.track(g)
	return w.ch
}

func (w *waiter) wake() {
	select {
	case w.ch <- struct{}{}:
	default: // woken already
	}
}

// done removes the registration: the drain ends.
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
		if w.ws.by[k] == w {
			delete(w.ws.by, k)
		}
	}
	w.keys = nil
}

// giveAway moves g's whole group to the drain of this engine that holds the
// smallest key of one of blocked, for which g would yield its keys (failed
// names the keys g could not get): that drain merges it at its next step,
// and g ends. It refuses a drain of another queue, and one whose group
// would leave no room for a request's keys, going by the keys it is
// registered under.
func (g *group) giveAway(blocked []*requests.Request, failed map[string]bool) bool {
	w := g.w
	if w == nil || w.ws == nil || g.e.stopping.Load() {
		return false
	}
	to := w.ws.holderFor(w, blocked, failed, g.e.maxGroupKeys()-requests.MaxKeys-len(g.held))
	if to == nil || !w.shut() {
		return false
	}
	if !to.give(slices.Collect(maps.Values(g.held))) {
		w.open()
		return false
	}
	clear(g.held)
	return true
}

// holderFor finds the drain other than w that g, w's drain, may give its
// group to for one of blocked (giveAway).
func (ws *wakers) holderFor(w *waiter, blocked []*requests.Request, failed map[string]bool, room int) *waiter {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, r := range blocked {
		smallest := r.Keys[0]
		if !failed[smallest] {
			continue
		}
		if to := ws.by[smallest]; to != nil && to != w && to.queue == w.queue && len(to.keys) <= room {
			return to
		}
	}
	return nil
}

// give adds leases to w's inbox and wakes its drain, unless it is closed.
func (w *waiter) give(ls []Lease) bool {
	if len(ls) == 0 {
		return true
	}
	w.mu.Lock()
	ok := !w.closed
	if ok {
		w.inbox = append(w.inbox, ls...)
	}
	w.mu.Unlock()
	if ok {
		w.wake()
	}
	return ok
}

// shut closes w's inbox, unless something is in it: its drain gives its
// group away only when it holds all of it.
func (w *waiter) shut() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.inbox) > 0 {
		return false
	}
	w.closed = true
	return true
}

func (w *waiter) open() {
	w.mu.Lock()
	w.closed = false
	w.mu.Unlock()
}

// receive merges the leases given to g's drain into g (add); closing, it
// takes no more after them. A gift that would take the group past
// maxGroupKeys is handed on instead.
func (g *group) receive(ctx context.Context, closing bool) error {
	w := g.w
	if w == nil {
		return nil
	}
	w.mu.Lock()
	ls := w.inbox
	w.inbox, w.closed = nil, w.closed || closing
	w.mu.Unlock()
	if len(g.held)+len(ls) > g.e.maxGroupKeys() {
		var keys []string
		for _, l := range ls {
			if _, ok := g.held[l.Key]; !ok {
				g.held[l.Key] = l
				keys = append(keys, l.Key)
			}
		}
		return g.giveUp(ctx, keys, nil, "h", 0)
	}
	for _, l := range ls {
		g.add(l)
	}
	return nil
}

// add adds a lease given to g. Of two leases of one key the higher token is
// the live one, if either is: a holder stalled past its lease, and the
// other took the key; the next peek finds out if it was lost too.
func (g *group) add(l Lease) {
	if cur, ok := g.held[l.Key]; !ok || cur.Token < l.Token {
		g.held[l.Key] = l
	}
}
