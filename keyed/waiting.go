package keyed

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast/holdfast/requests"
)

// Quiet waiting, a throughput mechanism outside the protocol (doc.go). A
// drain whose requests wait for keys other drains hold (doc.go, "Groups")
// looks again every few milliseconds, parked in between. Four things make
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
//     (no faster in the cart rush, and more worker CPU: commit bbe1684);
//   - a drain that wants a key which a parked drain of the same engine holds
//     takes that drain's whole group over (gather, wakers.take) before it
//     tries the keys it still lacks, and the drain taken over ends (unless it
//     drains another queue, or the merged group would leave no room for a
//     request's keys; of two leases of one key the higher token stays, add).
//     Where many requests share a key that sorts after keys of their own (a
//     cart of a long-tail option and a hot one), each is gathered by the
//     drain of its own key, which waits for the shared one: the shared key's
//     holder now takes those drains over and applies their requests in one
//     batch, where it used to yield the key to each in turn;
//   - a drain that would yield keys for a request whose smallest key a drain
//     of the same engine holds gives that drain its whole group instead
//     (giveAway), parked or not, and ends; the other merges it at the start
//     of its next step (receive). Where many requests share several hot keys
//     and each also names a key of its own that sorts before them (carts of
//     one or two of five hot options, each with one of 200 long-tail ones),
//     the drains of one worker that hold hot keys each meet requests whose
//     smallest key another holds, and none of them parks: they yielded keys
//     to each other at every step, and a rush ran at 60% of the rate without
//     the tail. Given away, their groups become one.
//
// Why taking over keeps the protocol's guarantees. The leases move between
// the two groups in the process, under the wakers' and the waiter's locks,
// never released: no other drain can take a key meanwhile, and the tokens,
// hence the fences, are the ones they were (K2). A parked drain does not
// touch its group until it resumes, so one group only ever uses a lease.
// Two groups list one key only when one of them lost that lease unawares
// (a step outlasted it, and another drain took the key): the merged group
// keeps the higher token, the later acquire, releases the other in Redis
// (a no-op unless that one is the live lease), and its next peek tells
// whether the one it kept is live.
// Only a drain that is stepping takes, and only from a parked one, which
// ends: a take makes one group of two and never splits one, so takes
// cannot go round in a circle, and each ends a drain. Every key stays held
// throughout, so doc.go's argument that someone always goes on holds of
// the merged group as of the two: it holds every smallest key either held,
// and yields for none of those requests. It takes only what leaves room
// for the keys of any one request (roomFor), and in the same step still
// tries and yields for what it could not take (held by a drain of another
// worker, or by one looking again).
//
// Giving away keeps them the same way. The leases wait in the receiver's
// inbox, never released, until its next step merges them, before it peeks
// (which extends them); a transaction of the receiver's that runs meanwhile
// keeps them alive with its own (keepAlive). A drain closes its inbox, under its lock, as its
// group empties or it hands its keys on (leave), taking in what came
// before: a gift after that is refused and stays with its giver, which
// yields as before; nothing is left in an inbox nobody reads. A giver
// closes its own inbox first and gives only with it empty, so of two drains
// that give to each other at once at most one gives. A giver ends, so
// gifts cannot go round in a circle either. The receiver holds the smallest
// key the giver yielded for, as the registry last saw it; if it let that
// key go since, the request is gathered by whoever holds it, as after a
// yield. A take moves the inbox of the drain it takes over with its group.
//
// Taking over and giving away each multiplied the carts a second of a cart
// rush with a long tail: docs/benchmarks.md, "Measured speed-ups", has the
// figures, and how and when they were measured.
//
// Options.PlainWaiting (QUIET_WAITING=false) turns all four off: every
// look is a whole step, on its timer alone, and keys move between drains
// through Redis only. None is needed for K1–K6: the looks go on either way,
// so a wake that is lost, a drain not taken over, a gift refused or a yield
// by a drain of another worker costs only the wait.

// waiting is the seam between the protocol and quiet waiting: the drain
// loop (drain.go) and a step (group.go, apply.go) call only these
// (TestTheProtocolCallsQuietWaitingOnlyThroughItsSeam). *waiter waits
// quietly; plainWaiting does nothing in each but pause, so the protocol
// reads without them.
type waiting interface {
	// receive merges the groups given to the drain into g before a step,
	// and registers the drain under the keys g then holds; closing, it
	// takes no more after them.
	receive(ctx context.Context, g *group, closing bool) error
	// pause waits up to d between two looks, or less when woken.
	pause(ctx context.Context, g *group, d time.Duration)
	// done ends the drain's registration.
	done()
	// unchanged returns the plan of the last idle step if a step sees what
	// that one saw; stepped records a step that ran its transaction.
	unchanged(keys []string, merged []entry) (plan, bool)
	stepped(keys []string, merged []entry, p plan, applied bool)
	// gather takes over parked drains holding keys g wants, and returns
	// the keys still wanted.
	gather(ctx context.Context, g *group, wanted map[string]string) (left map[string]string, took bool)
	// giveAway gives g's whole group to the drain that holds one of holders
	// instead of yielding for them, and reports whether it did.
	giveAway(g *group, holders []string) bool
	// yielded wakes the drains that keys were yielded to (keptFor's values).
	yielded(keptFor map[string]string)
	// gifts are the leases given to the drain and not merged yet.
	gifts() []Lease
}

// plainWaiting is Options.PlainWaiting: every look a whole step, on its
// timer alone, and keys moved between drains through Redis only.
type plainWaiting struct{}

func (plainWaiting) receive(context.Context, *group, bool) error          { return nil }
func (plainWaiting) pause(ctx context.Context, _ *group, d time.Duration) { sleep(ctx, d, nil) }
func (plainWaiting) done()                                                {}
func (plainWaiting) unchanged([]string, []entry) (plan, bool)             { return plan{}, false }
func (plainWaiting) stepped([]string, []entry, plan, bool)                {}
func (plainWaiting) giveAway(*group, []string) bool                       { return false }
func (plainWaiting) yielded(map[string]string)                            {}
func (plainWaiting) gifts() []Lease                                       { return nil }
func (plainWaiting) gather(_ context.Context, _ *group, w map[string]string) (map[string]string, bool) {
	return w, false
}

// newWaiting is a new drain's waiting, quiet unless Options.PlainWaiting.
func (e *Engine) newWaiting(queue string) waiting {
	if e.opt.PlainWaiting {
		return plainWaiting{}
	}
	return &waiter{ws: &e.wakers, ch: make(chan struct{}, 1), queue: queue}
}

// unchanged reports whether a step that holds keys and sees merged in their
// windows sees what the last idle step saw (sig), and returns that step's
// plan.
func (w *waiter) unchanged(keys []string, merged []entry) (plan, bool) {
	if w.sig == "" || w.sig != signature(keys, merged) {
		return plan{}, false
	}
	return w.plan, true
}

// stepped records a step that ran its apply transaction: what it saw and
// planned if it applied nothing, or that the group moved on.
func (w *waiter) stepped(keys []string, merged []entry, p plan, applied bool) {
	w.sig, w.plan = "", plan{}
	if !applied {
		w.sig, w.plan = signature(keys, merged), p
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

// gather takes over the groups of the drains of this engine that are
// parked holding keys g wants (wakers.take), and returns the keys it still
// wants: the next step applies what those drains waited for with g's own.
// A drain that is stopping takes nothing: it is about to hand its keys on.
func (w *waiter) gather(ctx context.Context, g *group, wanted map[string]string) (left map[string]string, took bool) {
	if ctx.Err() != nil || g.e.stopping.Load() {
		return wanted, false
	}
	for k := range wanted {
		took = g.e.wakers.take(k, g) || took
	}
	if !took {
		return wanted, false
	}
	left = maps.Clone(wanted)
	maps.DeleteFunc(left, func(k, _ string) bool { _, held := g.held[k]; return held })
	return left, true
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

// take moves into the whole group of the drain of this engine that is
// parked holding key, if it drains the same queue and into has room for it
// and then still for the keys of any one request (so roomFor does not hand
// them on again), and wakes that drain, which then ends: its group is
// empty. Its leases join into's through add. It reports whether it took
// anything.
func (ws *wakers) take(key string, into *group) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := ws.by[key]
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.parked || w.g.queue != into.queue || len(into.held)+len(w.g.held)+len(w.inbox) > into.e.maxGroupKeys()-requests.MaxKeys {
		return false
	}
	for _, l := range w.g.held {
		into.add(l)
	}
	for _, l := range w.inbox {
		into.add(l)
	}
	clear(w.g.held)
	w.inbox, w.closed = nil, true
	w.unregister()
	w.wake()
	return true
}

// waiter is one drain's quiet waiting: its registration with its engine's
// wakers, and what its last idle step saw (sig) and planned.
type waiter struct {
	ws    *wakers
	ch    chan struct{}
	queue string
	keys  []string
	sig   string
	plan  plan

	mu sync.Mutex
	// parked is set while the drain waits between two looks, and g is its
	// group: while parked the drain does not touch g, so take may empty it.
	parked bool
	g      *group
	// inbox holds the leases of groups given to this drain (giveAway) that
	// it has not merged yet; once closed it takes no more.
	inbox  []Lease
	closed bool
}

// track registers the drain under the keys g holds now; a drain that holds
// the keys it is registered under leaves the registry as it is. A drain
// is registered from its first step until done.
func (w *waiter) track(g *group) {
	keys := g.keys()
	if slices.Equal(keys, w.keys) {
		return
	}
	w.ws.mu.Lock()
	defer w.ws.mu.Unlock()
	w.unregister()
	for _, k := range keys {
		w.ws.by[k] = w
	}
	w.keys = keys
}

// pause parks the drain for up to d, or until a wake. Once it looks again
// no other drain takes its group, which is empty if one did.
func (w *waiter) pause(ctx context.Context, g *group, d time.Duration) {
	sleep(ctx, d, w.park(g))
	w.mu.Lock()
	w.parked = false
	w.mu.Unlock()
}

// park registers the drain under the keys g holds now (track), marks it
// parked, and returns the channel a wake arrives on. The drain is no longer
// parked (pause) before it touches g again.
func (w *waiter) park(g *group) <-chan struct{} {
	w.track(g)
	w.mu.Lock()
	w.parked, w.g = true, g
	w.mu.Unlock()
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

// giveAway moves g's whole group to the drain of this engine that holds
// one of holders, the smallest keys of the requests for which g would yield
// its keys: that drain merges it at its next step, and g ends. It refuses a
// drain of another queue, and one whose group would leave no room for a
// request's keys, going by the keys it is registered under.
func (w *waiter) giveAway(g *group, holders []string) bool {
	if g.e.stopping.Load() {
		return false
	}
	to := w.ws.holderFor(w, holders, g.e.maxGroupKeys()-requests.MaxKeys-len(g.held))
	if to == nil || !w.shut() {
		return false
	}
	if !to.give(slices.Collect(maps.Values(g.held))) {
		w.mu.Lock()
		w.closed = false // open again
		w.mu.Unlock()
		return false
	}
	clear(g.held)
	return true
}

// holderFor finds the first drain other than w that holds one of keys,
// drains w's queue, and is registered under at most room keys.
func (ws *wakers) holderFor(w *waiter, keys []string, room int) *waiter {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, k := range keys {
		if to := ws.by[k]; to != nil && to != w && to.queue == w.queue && len(to.keys) <= room {
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

// gifts are the leases in w's inbox: not merged yet, they are kept alive
// with the group's own while its step runs (keepAlive).
func (w *waiter) gifts() []Lease {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.inbox)
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

// yielded wakes the drains of this engine that hold the keys others were
// yielded for.
func (w *waiter) yielded(keptFor map[string]string) {
	for _, p := range keptFor {
		w.ws.wake(p)
	}
}

// receive merges the leases given to g's drain into g (add); closing, it
// takes no more after them. A gift that would take the group past
// maxGroupKeys is handed on instead. It releases the leases add dropped,
// and registers the drain under the keys g holds then (track).
func (w *waiter) receive(ctx context.Context, g *group, closing bool) error {
	w.mu.Lock()
	ls := w.inbox
	w.inbox, w.closed = nil, w.closed || closing
	w.mu.Unlock()
	var gifted []string
	for _, l := range ls {
		if g.add(l) {
			gifted = append(gifted, l.Key)
		}
	}
	err := g.release(ctx, g.dropped, nil, "h", 0)
	g.dropped = nil
	if len(g.held) > g.e.maxGroupKeys() {
		err = errors.Join(err, g.giveUp(ctx, gifted, nil, "h", 0))
	}
	w.track(g)
	return err
}

// add adds a lease given to g or taken by it, and reports whether g holds
// it now. Of two leases of one key the higher token is the live one, if
// either is: a holder stalled past its lease, and the other took the key;
// the next peek finds out if it was lost too. The other goes to dropped,
// for receive to release: if a Redis that lost its fences handed out the
// lower token last (doc.go, "Forgetting"), that one is live, and released
// it goes to a new drain instead of lapsing unused.
func (g *group) add(l Lease) bool {
	cur, ok := g.held[l.Key]
	switch {
	case ok && cur.Token == l.Token:
		return false
	case ok && cur.Token > l.Token:
		g.dropped = append(g.dropped, l)
		return false
	case ok:
		g.dropped = append(g.dropped, cur)
	}
	g.held[l.Key] = l
	return true
}
