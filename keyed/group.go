package keyed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/requests"
)

// group is one drain's held keys. It starts with the key its task named
// and grows by the other keys of the requests it meets (doc.go, "Groups"),
// applying their merged mailboxes in batches.
type group struct {
	e     *Engine
	queue string
	held  map[string]Lease
	// limit is the batch size: halved to isolate a request whose applier
	// fails, doubled back after each successful batch.
	limit int
	// wait is how the drain waits for keys other drains hold: quietly or
	// plainly (waiting.go).
	wait waiting
	// dropped are leases of keys the group got twice, from a gift or a
	// take of quiet waiting, that it let go of for the other one (add);
	// the next receive releases them.
	dropped []Lease
}

// maxGroupKeys bounds the keys one drain holds: enough for a full batch of
// requests that each bring a key of their own (a user's) beside the hot
// ones they share, and never fewer than the keys of the largest request
// intake accepts (requests.MaxKeys), however small BatchMax is.
func (e *Engine) maxGroupKeys() int { return 2*e.opt.BatchMax + requests.MaxKeys }

// A key given up to the holder of a request's smallest key is kept for it
// for promiseTTL: that holder retries every few milliseconds, and no other
// drain takes the key meanwhile. A drain task follows at yieldDelay, after
// the promise, in case the holder does not come (it left, or died).
const (
	promiseTTL = 500 * time.Millisecond
	yieldDelay = time.Second
)

func (e *Engine) newGroup(queue string, l Lease) *group {
	return &group{e: e, queue: queue, held: map[string]Lease{l.Key: l}, limit: e.opt.BatchMax, wait: e.newWaiting(queue)}
}

func (g *group) keys() []string { return slices.Sorted(maps.Keys(g.held)) }

func (g *group) leases() []Lease {
	return slices.SortedFunc(maps.Values(g.held), func(a, b Lease) int { return strings.Compare(a.Key, b.Key) })
}

// window is what a peek saw of one key's mailbox.
type window struct {
	ids  []string
	seqs []int64
	// last is the highest seq the peek covers: every entry of the mailbox
	// up to it is in ids. A window that took the whole mailbox covers all.
	last int64
}

// peek extends every held lease and reads the head of each mailbox, in one
// round trip. A lease found lost is reported in lost. renewed is false when
// the windows may lack requests Redis lost that are not yet marked (renew,
// in reconcile.go): Redis had no incarnation right after them.
func (g *group) peek(ctx context.Context, keys []string) (wins map[string]window, lost []string, renewed bool, err error) {
	n := g.e.opt.BatchMax
	cmds, inc, err := evalThenGet(ctx, g.e.rdb, peekScript, len(keys), func(i int) ([]string, []any) {
		k := keys[i]
		return []string{leaseKey(k), mboxKey(k)}, []any{g.held[k].Token, g.e.opt.LeaseTTL.Milliseconds(), n}
	}, g.e.incarnation)
	if err != nil {
		return nil, nil, false, fmt.Errorf("keyed: peek: %w", err)
	}
	renewed = g.e.incarnation == "" || inc != ""
	wins = make(map[string]window, len(keys))
	for i, k := range keys {
		pairs, err := cmds[i].StringSlice()
		if errors.Is(err, redis.Nil) {
			lost = append(lost, k)
			continue
		}
		if err != nil {
			return nil, nil, false, fmt.Errorf("keyed: peek %s: %w", k, err)
		}
		w := window{last: 1<<63 - 1}
		for j := 0; j+1 < len(pairs); j += 2 {
			// Scores are seqs, well within a float64's exact integers.
			seq, err := strconv.ParseFloat(pairs[j+1], 64)
			if err != nil {
				return nil, nil, false, fmt.Errorf("keyed: peek %s: score %q: %w", k, pairs[j+1], err)
			}
			w.ids, w.seqs = append(w.ids, pairs[j]), append(w.seqs, int64(seq))
		}
		if len(w.ids) == n {
			w.last = w.seqs[n-1]
		}
		wins[k] = w
	}
	return wins, lost, renewed, nil
}

// look peeks, and when Redis has no incarnation it renews it (renew) and
// peeks again; renewed is false if it was lost once more.
func (g *group) look(ctx context.Context, keys []string) (wins map[string]window, lost []string, renewed bool, err error) {
	wins, lost, renewed, err = g.peek(ctx, keys)
	if err == nil && !renewed {
		if err = g.e.renew(ctx); err == nil {
			wins, lost, renewed, err = g.peek(ctx, keys)
		}
	}
	return wins, lost, renewed, err
}

// entry is one request in the merged mailboxes of a group.
type entry struct {
	id   string
	seq  int64
	keys []string // the held keys whose mailbox holds it
}

// merge lists the requests of the windows once each, in seq order.
func merge(wins map[string]window) []entry {
	at := map[string]int{}
	var out []entry
	for _, k := range slices.Sorted(maps.Keys(wins)) {
		w := wins[k]
		for i, id := range w.ids {
			if j, ok := at[id]; ok {
				out[j].keys = append(out[j].keys, k)
				continue
			}
			at[id] = len(out)
			out = append(out, entry{id: id, seq: w.seqs[i], keys: []string{k}})
		}
	}
	slices.SortFunc(out, func(a, b entry) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// plan is what a step decided, filled in by its pick.
type plan struct {
	blocked []*requests.Request // requests that could not be applied, in seq order
	// wanted are the keys to try for blocked requests, each with the key
	// the group holds as that request's smallest (its claim on a promised
	// key), or "" when the group wants the smallest key itself.
	wanted map[string]string
	// first is the first blocked request this group gathers (it holds
	// the request's smallest key), and lacking are that request's keys the
	// group does not hold (roomFor).
	first   *requests.Request
	lacking []string
}

// picker returns the pick of an apply transaction: in seq order, the
// requests whose every key the group holds and whose place each of those
// keys' windows covers, skipping any request that shares a key with an
// earlier one it could not apply (that one goes first on that key, K3).
// Requests on disjoint keys do not wait for each other.
func (g *group) picker(wins map[string]window, p *plan) pickFunc {
	return func(open []*requests.Request, limit int) []*requests.Request {
		*p = plan{wanted: map[string]string{}}
		blocked := map[string]bool{}
		var batch []*requests.Request
		for _, r := range open {
			if len(batch) == limit {
				break
			}
			ok := true
			var lacking []string
			for _, k := range r.Keys {
				w, seen := wins[k]
				if _, holds := g.held[k]; !holds {
					lacking = append(lacking, k)
					ok = false
				} else if blocked[k] || !seen || r.Seq > w.last {
					ok = false
				}
			}
			if ok {
				batch = append(batch, r)
				continue
			}
			p.blocked = append(p.blocked, r)
			for _, k := range r.Keys {
				blocked[k] = true
			}
			// The holder of a request's smallest key gathers the rest (keys
			// are sorted at intake); any other drain only tries for that key.
			smallest := r.Keys[0]
			if _, designated := g.held[smallest]; !designated {
				lacking, smallest = []string{smallest}, ""
			} else if p.first == nil {
				p.first, p.lacking = r, lacking
			}
			for _, k := range lacking {
				if _, ok := p.wanted[k]; !ok {
					p.wanted[k] = smallest
				}
			}
		}
		return batch
	}
}

// step applies one batch of the group's merged mailboxes and then takes the
// keys its blocked requests want. progress is false when nothing changed:
// everything left waits for keys other drains hold.
func (g *group) step(ctx context.Context) (progress bool, err error) {
	keys := g.keys()
	wins, lost, renewed, err := g.look(ctx, keys)
	switch {
	case err != nil:
		return false, err
	case len(lost) > 0:
		return false, &lostKeys{keys: lost}
	case !renewed:
		return false, nil // lost again: look again
	}
	if progress, err = g.releaseEmpty(ctx, wins); err != nil {
		return false, err
	}
	merged := merge(wins)
	if len(merged) == 0 {
		return progress, nil
	}
	p, applied, err := g.applyWindows(ctx, keys, wins, merged)
	if err != nil || len(p.wanted) == 0 {
		return progress || applied, err
	}
	moved, err := g.want(ctx, p)
	return progress || applied || moved, err
}

// applyWindows applies one batch of the requests merged from wins, and
// returns the plan for those it could not apply. A step that sees what
// the last idle one saw reuses its plan instead (waiting.go).
func (g *group) applyWindows(ctx context.Context, keys []string, wins map[string]window, merged []entry) (p plan, applied bool, err error) {
	ids, bad := requestIDs(merged)
	if len(ids) == 0 {
		g.e.finish(ctx, g.queue, result{gone: bad}, mailboxesOf(merged))
		return p, true, nil
	}
	if p, ok := g.wait.unchanged(keys, merged); ok {
		return p, false, nil
	}
	if err := g.e.store.MarkProcessing(ctx, progressMarks(wins)); err != nil {
		return p, false, err
	}
	// Each attempt's pick fills p anew: the last one's plan stands.
	res, err := g.applyRetrying(ctx, ids, g.picker(wins, &p))
	if err != nil {
		return p, false, err
	}
	res.gone = append(res.gone, bad...)
	g.e.finish(ctx, g.queue, res, mailboxesOf(merged))
	applied = len(res.applied)+len(res.gone) > 0
	g.wait.stepped(keys, merged, p, applied)
	return p, applied, nil
}

// want takes the keys p's blocked requests want, making room first
// (roomFor), and yields for those whose smallest key another drain holds.
func (g *group) want(ctx context.Context, p plan) (moved bool, err error) {
	wanted := p.wanted
	if lacking, others := g.roomFor(p); lacking != nil {
		if err := g.giveUp(ctx, others, nil, "h", 0); err != nil {
			return false, err
		}
		wanted = lacking
	}
	wanted, took := g.wait.gather(ctx, g, wanted)
	got, failed, err := g.acquire(ctx, wanted)
	if err != nil {
		return false, err
	}
	yielded, err := g.yield(ctx, p.blocked, failed)
	return took || yielded || got > 0, err
}

// roomFor checks that the keys still lacking for the first blocked request
// this group gathers (plan.first) fit beside those it holds (maxGroupKeys).
// When they do not, it returns them, each claiming that request's smallest
// key, and the held keys the request does not name: handed on, these make
// the room, as a request names at most requests.MaxKeys keys, fewer than a
// group holds. A group filled with the keys of later requests, none of which
// it may apply before that one (K3), would otherwise wait out its slice.
func (g *group) roomFor(p plan) (lacking map[string]string, others []string) {
	if p.first == nil || len(p.lacking) <= g.e.maxGroupKeys()-len(g.held) {
		return nil, nil
	}
	lacking = map[string]string{}
	for _, k := range p.lacking {
		lacking[k] = p.first.Keys[0]
	}
	for _, k := range g.keys() {
		if !slices.Contains(p.first.Keys, k) {
			others = append(others, k)
		}
	}
	return lacking, others
}

// releaseEmpty lets go of the keys whose window is empty, in one round trip,
// each atomically with finding its mailbox so; a key whose mailbox got an
// entry meanwhile stays. It deletes the released keys from wins.
func (g *group) releaseEmpty(ctx context.Context, wins map[string]window) (released bool, err error) {
	var empty []Lease
	for k, w := range wins {
		if len(w.ids) == 0 {
			empty = append(empty, g.held[k])
		}
	}
	if len(empty) == 0 {
		return false, nil
	}
	// A key stays held unless released: one whose mailbox got an entry, one
	// whose reply is unknown (the next peek tells), and one found lost,
	// which lostGroup handles as lost.
	cmds, err := g.e.releaseAll(ctx, empty, "ifempty", nil)
	var lost []string
	for i, l := range empty {
		st, cerr := cmds[i].Int()
		switch {
		case cerr != nil:
			err = cmp.Or(err, cerr)
		case st == relLost:
			lost = append(lost, l.Key)
		case st != relKept:
			delete(g.held, l.Key)
			delete(wins, l.Key)
			released = true
		}
	}
	if err != nil {
		return released, fmt.Errorf("keyed: release: %w", err)
	}
	if len(lost) > 0 {
		return released, &lostKeys{keys: lost}
	}
	return released, nil
}

// mailboxesOf maps each merged request id to the held keys whose mailboxes
// hold it, for finish.
func mailboxesOf(merged []entry) map[string][]string {
	out := make(map[string][]string, len(merged))
	for _, m := range merged {
		out[m.id] = m.keys
	}
	return out
}

// requestIDs returns the merged requests' ids, and the entries that are
// not ids as intake writes them, which finish drops from their mailboxes
// as it does requests already terminal.
func requestIDs(merged []entry) (ids []uuid.UUID, bad []string) {
	for _, m := range merged {
		if id, err := uuid.Parse(m.id); err == nil && id.String() == m.id {
			ids = append(ids, id)
		} else {
			bad = append(bad, m.id)
		}
	}
	return ids, bad
}

// progressMarks is how far each key's window reaches: the processing mark
// of its requests (requests.Store.MarkProcessing).
func progressMarks(wins map[string]window) map[string]int64 {
	marks := make(map[string]int64, len(wins))
	for k, w := range wins {
		if n := len(w.seqs); n > 0 {
			marks[k] = w.seqs[n-1]
		}
	}
	return marks
}

// acquire tries the leases of wanted (key → claim), in one round trip, and
// adds those it got to the group; failed are the keys another drain holds,
// or keeps for another. A key kept for the holder of a key the group holds
// is the group's, whatever request it was wanted for: those are asked for
// again at once, claiming that key. It never waits for a lease, so no drain
// ever waits while holding one. Cut to the group's room in key order, it
// may leave out keys the first request it gathers lacks; once the group is
// full, roomFor makes room for those.
func (g *group) acquire(ctx context.Context, wanted map[string]string) (got int, failed map[string]bool, err error) {
	keys := slices.Sorted(maps.Keys(wanted))
	if room := g.e.maxGroupKeys() - len(g.held); len(keys) > room {
		keys = keys[:max(room, 0)]
	}
	claims := maps.Clone(wanted)
	failed = map[string]bool{}
	for try := 0; len(keys) > 0; try++ {
		keptFor, err := g.tryLeases(ctx, keys, claims)
		if err != nil {
			return got, nil, err
		}
		got += len(keys) - len(keptFor)
		keys = keys[:0]
		for _, k := range slices.Sorted(maps.Keys(keptFor)) {
			p := keptFor[k]
			if _, ours := g.held[p]; ours && try == 0 {
				claims[k] = p
				keys = append(keys, k)
			} else {
				failed[k] = true
			}
		}
	}
	return got, failed, nil
}

// tryLeases runs acquireScript for keys, claiming wanted[k], in one round
// trip, and adds the leases it got to the group. keptFor maps each key it
// did not get to the key its lease is kept for ("" when held).
func (g *group) tryLeases(ctx context.Context, keys []string, wanted map[string]string) (keptFor map[string]string, err error) {
	e := g.e
	cmds, err := evalAll(ctx, e.rdb, acquireScript, len(keys), func(i int) ([]string, []any) {
		k := keys[i]
		return []string{leaseKey(k), fenceKey(k), forKey(k)}, []any{e.opt.LeaseTTL.Milliseconds(), wanted[k], e.opt.ForgetAfter.Milliseconds()}
	})
	if err != nil {
		return nil, fmt.Errorf("keyed: acquire: %w", err)
	}
	keptFor = map[string]string{}
	for i, k := range keys {
		tok, kept, err := acquired(cmds[i])
		if err != nil {
			return nil, fmt.Errorf("keyed: acquire %s: %w", k, err)
		}
		if tok > 0 {
			g.held[k] = Lease{Key: k, Token: tok}
		} else {
			keptFor[k] = kept
		}
	}
	return keptFor, nil
}

// yield gives up the keys of each blocked request whose smallest key another
// drain holds: that drain applies the request, and the others make way for
// it, keeping each key for it a moment (doc.go, "Groups"). The holder of a
// request's smallest key never yields for it, so someone always goes on.
func (g *group) yield(ctx context.Context, blocked []*requests.Request, failed map[string]bool) (bool, error) {
	give := map[string]string{} // key → the smallest key of the request it is kept for
	var holders []string        // those smallest keys, in blocked's order
	for _, r := range blocked {
		smallest := r.Keys[0] // keys are sorted at intake
		if _, mine := g.held[smallest]; mine || !failed[smallest] {
			continue
		}
		holders = append(holders, smallest)
		for _, k := range r.Keys {
			if _, ok := g.held[k]; ok {
				if _, given := give[k]; !given {
					give[k] = smallest
				}
			}
		}
	}
	if len(give) == 0 {
		return false, nil
	}
	if g.wait.giveAway(g, holders) {
		return true, nil
	}
	return true, g.giveUp(ctx, slices.Sorted(maps.Keys(give)), give, "y", yieldDelay)
}

// leave gives every key up, those given to the drain too (waiting.go),
// each with a drain task if its mailbox has entries left, after delay. It
// completes even once ctx is cancelled (a drain that is stopping), as
// giveUp does.
func (g *group) leave(ctx context.Context, delay time.Duration) error {
	err := g.wait.receive(ctx, g, true)
	return errors.Join(err, g.giveUp(ctx, g.keys(), nil, "h", delay))
}

// giveUp releases the leases of keys in one round trip, each kept for
// keptFor[key] for promiseTTL when that is set (yield). A key whose mailbox
// has entries gets a drain task after delay (a yield's spread by up to a
// quarter more), its id prefix naming the cause. It runs to the end even
// once ctx is cancelled: keys given up halfway would wait for their leases
// to lapse. A lease that had already lapsed is handled as lost: tasks that
// arrived meanwhile may have left their requests to this holder.
func (g *group) giveUp(ctx context.Context, keys []string, keptFor map[string]string, prefix string, delay time.Duration) error {
	ls := make([]Lease, len(keys))
	for i, k := range keys {
		ls[i] = g.held[k]
		delete(g.held, k)
	}
	return g.release(ctx, ls, keptFor, prefix, delay)
}

// release releases ls, which g no longer holds, as giveUp describes.
func (g *group) release(ctx context.Context, ls []Lease, keptFor map[string]string, prefix string, delay time.Duration) error {
	if len(ls) == 0 {
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	cmds, err := g.e.releaseAll(ctx, ls, "force", keptFor)
	if err != nil {
		return fmt.Errorf("keyed: release: %w", err)
	}
	var errs []error
	g.wait.yielded(keptFor)
	for i, l := range ls {
		st, err := cmds[i].Int()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("keyed: release %s: %w", l.Key, err))
		case st == relLost:
			errs = append(errs, g.e.lostLease(ctx, l, g.queue))
		case st == relNonEmpty:
			g.e.m.HandOffs.WithLabelValues(g.queue).Inc()
			d := delay
			if keptFor != nil {
				d += rand.N(delay / 4)
			}
			errs = append(errs, g.e.enqueueDrain(ctx, g.queue, l.Key, tokenID(prefix, l.Token), d))
		}
	}
	return errors.Join(errs...)
}

// releaseAll runs releaseScript for each of ls in one round trip, in mode
// ("ifempty" or "force"), keeping each key for keptFor[key] for promiseTTL
// when that is set.
func (e *Engine) releaseAll(ctx context.Context, ls []Lease, mode string, keptFor map[string]string) ([]*redis.Cmd, error) {
	return evalAll(ctx, e.rdb, releaseScript, len(ls), func(i int) ([]string, []any) {
		k := ls[i].Key
		return []string{leaseKey(k), mboxKey(k), forKey(k)}, []any{ls[i].Token, mode, keptFor[k], promiseTTL.Milliseconds()}
	})
}

// lostKeys is a step that found some of the group's leases gone.
type lostKeys struct{ keys []string }

func (l *lostKeys) Error() string { return fmt.Sprintf("keyed: leases lost: %v", l.keys) }
func (l *lostKeys) Unwrap() error { return ErrLeaseLost }
