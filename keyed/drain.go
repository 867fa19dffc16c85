package keyed

import (
	"context"
	"errors"
	"time"

	"github.com/holdfast/holdfast/metrics"
	"github.com/holdfast/holdfast/requests"
)

// Drain takes key's lease and applies its mailbox. If another drain holds
// the lease, that holder will apply everything in the mailbox (it releases
// only atomically with finding it empty, or with a drain task for what is
// left), so Drain returns at once; so it
// does when the key is kept for the holder of another key (a yield's
// promise): the yield enqueued a drain task of its own to follow.
func (e *Engine) Drain(ctx context.Context, key, queue string) error {
	l, ok, empty, err := e.acquireWork(ctx, key)
	switch {
	case err != nil:
		return err
	case empty:
		e.m.AlreadyApplied.WithLabelValues(queue).Inc()
		return nil
	case !ok:
		e.m.LeaseBusy.WithLabelValues(queue).Inc()
		return nil
	}
	return e.drainHeld(ctx, l, queue)
}

// drainHeld drains the key of l, which this process holds, and the keys its
// group takes on the way (group.go), for at most DrainSlice.
func (e *Engine) drainHeld(ctx context.Context, l Lease, queue string) error {
	g := e.newGroup(queue, l)
	deadline := time.Now().Add(e.opt.DrainSlice)
	var wait time.Duration
	defer g.wait.done()
	for {
		// Its group empty, the drain ends, unless a group was given to it
		// meanwhile (waiting.go): it goes on with that one, taking no more.
		if err := g.wait.receive(ctx, g, len(g.held) == 0); err != nil {
			return errors.Join(err, g.leave(ctx, time.Second))
		}
		if len(g.held) == 0 {
			return nil
		}
		if e.stopping.Load() || ctx.Err() != nil || !time.Now().Before(deadline) {
			return g.leave(ctx, 0)
		}
		progress, err := g.step(ctx)
		var lost *lostKeys
		switch {
		case errors.As(err, &lost):
			return e.lostGroup(ctx, g, lost.keys)
		case errors.Is(err, ErrLeaseLost):
			return e.lostGroup(ctx, g, nil)
		case err != nil:
			if herr := g.leave(ctx, time.Second); herr != nil {
				e.log.Warn("hand off after error", "keys", g.keys(), "err", herr)
			}
			return err // retried, and shown in Asynqmon
		case progress:
			wait = 0
			continue
		}
		// Everything left waits for keys that other drains hold and will
		// give up (doc.go, "Groups"): look again shortly, or once a drain
		// yields one to this group; or end, the group empty, once a drain
		// took it over (waiting.go).
		wait = min(max(2*wait, time.Millisecond), 20*time.Millisecond)
		g.wait.pause(ctx, g, wait)
	}
}

// lostGroup handles a group that found leases gone: the keys in lost (all,
// when nil) as lost leases, the others handed on.
func (e *Engine) lostGroup(ctx context.Context, g *group, lost []string) error {
	if lost == nil {
		lost = g.keys()
	}
	var errs []error
	for _, k := range lost {
		if l, ok := g.held[k]; ok {
			delete(g.held, k)
			errs = append(errs, e.lostLease(ctx, l, g.queue))
		}
	}
	errs = append(errs, g.leave(ctx, 0))
	return errors.Join(errs...)
}

// finish removes applied and stale entries from their mailboxes, announces
// the outcomes and records metrics. An applied request leaves the mailbox
// of each of its keys; a stale entry (terminal already, unknown, or no id)
// leaves the mailboxes mboxes names for it. A failure here is harmless:
// stale entries are met again and dropped next time, and long-polls
// re-read Postgres.
func (e *Engine) finish(ctx context.Context, queue string, res result, mboxes map[string][]string) {
	if len(res.applied)+len(res.gone) == 0 {
		return
	}
	pipe := e.rdb.Pipeline()
	for _, r := range res.applied {
		for _, k := range r.Keys {
			pipe.ZRem(ctx, mboxKey(k), r.ID.String())
		}
	}
	for _, id := range res.gone {
		for _, k := range mboxes[id] {
			pipe.ZRem(ctx, mboxKey(k), id)
		}
	}
	if len(res.applied) > 0 {
		if msg, err := requests.DoneMessage(res.applied); err != nil {
			e.log.Warn("cannot announce outcomes; long polls will read them", "err", err)
		} else {
			pipe.Publish(ctx, requests.DoneChannel, msg)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		e.log.Warn("mailbox cleanup failed", "err", err)
	}
	if len(res.applied) == 0 {
		return
	}
	e.m.BatchSize.WithLabelValues(queue).Observe(float64(len(res.applied)))
	for i, r := range res.applied {
		code := metrics.NoCode
		if p := res.outs[i].Problem; p != nil {
			code = p.Code
		}
		e.m.Completed.WithLabelValues(r.Type, string(res.outs[i].Status), code).Inc()
		e.m.Latency.WithLabelValues(r.Type).Observe(r.CompletedAt.Sub(r.AcceptedAt).Seconds()) // both by Postgres' clock
	}
}

// lostLease handles a holder that found its lease gone. If nobody took the
// key over, the requests that arrived meanwhile have no task coming (theirs
// saw the lease held and finished), so a drain is enqueued; it does nothing
// if a new holder exists.
func (e *Engine) lostLease(ctx context.Context, l Lease, queue string) error {
	e.m.LeaseLost.WithLabelValues(queue).Inc()
	return e.enqueueDrain(context.WithoutCancel(ctx), queue, l.Key, tokenID("l", l.Token), 0)
}

// keepAlive extends the leases while an apply transaction runs, all of a
// group's in one round trip, so a slow batch does not lose its keys
// midway. A holder that stalls (or whose process freezes) stops extending
// and is fenced out once a successor commits. leases is read at each
// extension: a group's gifts (waiting.go) join it as they arrive.
func (e *Engine) keepAlive(ctx context.Context, leases func() []Lease) (stop func()) {
	return every(ctx, e.opt.LeaseTTL/3, func(ctx context.Context) {
		ls := leases()
		_, _ = evalAll(ctx, e.rdb, extendScript, len(ls), func(i int) ([]string, []any) {
			return []string{leaseKey(ls[i].Key)}, []any{ls[i].Token, e.opt.LeaseTTL.Milliseconds()}
		})
	})
}

// every runs fn every d in a goroutine of its own until stop, which waits
// for it. fn's context ends with stop, not with ctx.
func every(ctx context.Context, d time.Duration, fn func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fn(ctx)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// sleep waits d, until wake delivers, or until ctx ends.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-wake:
	case <-ctx.Done():
	}
}
