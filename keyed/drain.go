package keyed

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast/holdfast/requests"
)

// Drain takes key's lease and applies its mailbox. If another process holds
// the lease, that holder will apply everything in the mailbox (it releases
// only atomically with finding it empty), so Drain returns at once.
func (e *Engine) Drain(ctx context.Context, key, queue string) error {
	if e.opt.Unguarded {
		ids, err := e.rdb.ZRange(ctx, mboxKey(key), 0, int64(e.opt.BatchMax-1)).Result()
		if err != nil {
			return err
		}
		for _, s := range ids {
			if id, err := uuid.Parse(s); err == nil {
				if err := e.applyUnguarded(ctx, id, []string{key}, queue); err != nil {
					return err
				}
			}
		}
		return nil
	}
	// A drain of this process holds the key and looks at the mailbox again
	// before it lets go, so it will apply this task's request (which was in
	// the mailbox before its task was enqueued): no Redis round trip needed.
	if _, held := e.local.Load(key); held {
		e.m.LeaseBusy.WithLabelValues(queue).Inc()
		return nil
	}
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

func (e *Engine) drainHeld(ctx context.Context, l Lease, queue string) error {
	d := &drain{e: e, queue: queue, l: l, limit: e.opt.BatchMax}
	// The local mark is withdrawn before every way out, so a task that
	// arrives after it goes for the lease itself.
	e.local.Store(l.Key, d)
	leave := func() { e.local.CompareAndDelete(l.Key, d) }
	defer leave()
	deadline := e.now().Add(e.opt.DrainSlice)
	for {
		if e.stopped() || ctx.Err() != nil || !e.now().Before(deadline) {
			leave()
			return e.handOff(context.WithoutCancel(ctx), d.l, queue, 0)
		}
		ids, lastSeq, err := e.peek(ctx, d.l, e.opt.BatchMax)
		if err == nil && len(ids) == 0 {
			leave()
			switch st, err := e.release(ctx, d.l, true); {
			case err == nil && st == relLost:
				return e.lostLease(ctx, d.l, queue)
			case err == nil && st != relKept:
				return nil
			}
			// Still held (the mailbox was not empty), or the release failed
			// and the next peek finds out.
			e.local.Store(l.Key, d)
			continue
		}
		more := false
		if err == nil {
			more, err = d.step(ctx, ids, lastSeq)
		}
		switch {
		case errors.Is(err, ErrLeaseLost):
			leave()
			return e.lostLease(ctx, d.l, queue)
		case err != nil:
			leave()
			return e.giveUp(ctx, d.l, queue, err)
		case !more:
			return nil
		}
	}
}

// drain is one holder's state while it applies a key's mailbox.
type drain struct {
	e     *Engine
	queue string
	l     Lease
	// limit is the batch size: halved to isolate a request whose applier
	// fails, doubled back after each successful batch.
	limit int
}

// applyUnguarded applies one request on its own, as a handler-only design
// would: the control case of Options.Unguarded.
func (e *Engine) applyUnguarded(ctx context.Context, id uuid.UUID, keys []string, queue string) error {
	all := func(open []*requests.Request, _ int) []*requests.Request { return open }
	res, err := e.attempt(ctx, make([]Lease, len(keys)), []uuid.UUID{id}, all, 1, nil)
	if err != nil {
		return err
	}
	e.finish(ctx, queue, res, keys)
	return nil
}

// step applies the next batch from the head of the mailbox: the longest run
// of requests whose only key is the held one, or a single multi-key request.
// more is false when the holder gave the key up.
func (d *drain) step(ctx context.Context, ids []string, lastSeq int64) (more bool, err error) {
	e := d.e
	uids := make([]uuid.UUID, 0, len(ids))
	var bad []any
	for _, s := range ids {
		if id, err := uuid.Parse(s); err == nil {
			uids = append(uids, id)
		} else {
			bad = append(bad, s)
		}
	}
	if len(bad) > 0 {
		if err := e.rdb.ZRem(ctx, mboxKey(d.l.Key), bad...).Err(); err != nil {
			return false, fmt.Errorf("keyed: drop bad mailbox entries: %w", err)
		}
	}
	if len(uids) == 0 {
		return true, nil
	}
	if err := e.store.MarkProcessing(ctx, d.l.Key, lastSeq); err != nil {
		return false, err
	}
	if e.beforeApply != nil {
		e.beforeApply()
	}
	key := d.l.Key
	run := func(open []*requests.Request, limit int) []*requests.Request {
		n := 0
		for n < len(open) && n < limit && len(open[n].Keys) == 1 && open[n].Keys[0] == key {
			n++
		}
		return open[:n]
	}
	leases, res, err := e.applyRetrying(ctx, []Lease{d.l}, uids, run, &d.limit)
	d.l = leases[0]
	if err != nil {
		return false, err
	}
	e.finish(ctx, d.queue, res, []string{key})
	if len(res.applied) == 0 && res.head != nil {
		return d.multi(ctx, res.head)
	}
	return true, nil
}

// multi handles a mailbox whose head is a request with several keys.
func (d *drain) multi(ctx context.Context, head *requests.Request) (bool, error) {
	e, queue := d.e, d.queue
	keys := head.Keys // sorted at intake
	if keys[0] != d.l.Key {
		// The holder of the first key applies it; make sure one is coming and
		// step aside. That holder hands this key on afterwards.
		if err := e.enqueueDrain(ctx, queue, keys[0], "s"+head.ID.String(), 0); err != nil {
			return false, err
		}
		_, err := e.release(ctx, d.l, false)
		return false, err
	}
	retry := 20*time.Millisecond + rand.N(50*time.Millisecond)
	var extras []Lease
	releaseExtras := func() {
		for _, x := range extras {
			if err := e.handOff(context.WithoutCancel(ctx), x, queue, 0); err != nil {
				e.log.Warn("hand off extra key; the reconciler will drain it", "key", x.Key, "err", err)
			}
		}
	}
	// Sorted order, all or nothing: on any miss release everything taken.
	for _, k := range keys[1:] {
		x, ok, err := e.TryAcquire(ctx, k)
		if err != nil {
			releaseExtras()
			return false, err
		}
		if !ok {
			releaseExtras()
			return false, e.handOff(ctx, d.l, queue, retry)
		}
		extras = append(extras, x)
	}
	want := head.ID.String()
	for _, x := range extras {
		first, err := e.rdb.ZRange(ctx, mboxKey(x.Key), 0, 0).Result()
		if err != nil {
			releaseExtras()
			return false, fmt.Errorf("keyed: head of %s: %w", x.Key, err)
		}
		if len(first) == 0 || first[0] != want {
			// Earlier requests on that key go first (K3): hand it to its own
			// drain, and come back.
			releaseExtras()
			return false, e.handOff(ctx, d.l, queue, retry)
		}
	}
	only := func(open []*requests.Request, _ int) []*requests.Request {
		if len(open) > 0 && open[0].ID == head.ID {
			return open[:1]
		}
		return nil
	}
	one := 1
	leases, res, err := e.applyRetrying(ctx, append([]Lease{d.l}, extras...), []uuid.UUID{head.ID}, only, &one)
	d.l, extras = leases[0], leases[1:]
	if err != nil {
		releaseExtras()
		if errors.Is(err, ErrLeaseLost) {
			// Some key was taken over; give the first one up too, so the
			// request's next drain can take them all again.
			_ = e.handOff(context.WithoutCancel(ctx), d.l, queue, retry)
		}
		return false, err
	}
	e.finish(ctx, queue, res, keys)
	releaseExtras()
	return true, nil
}

// finish removes applied and stale ids from the mailboxes of keys, announces
// the outcomes and records metrics. A failure here is harmless: stale
// entries are skipped as terminal next time, and long-polls re-read Postgres.
func (e *Engine) finish(ctx context.Context, queue string, res result, keys []string) {
	if len(res.applied)+len(res.gone) == 0 {
		return
	}
	members := make([]any, 0, len(res.applied)+len(res.gone))
	for _, r := range res.applied {
		members = append(members, r.ID.String())
	}
	for _, id := range res.gone {
		members = append(members, id.String())
	}
	pipe := e.rdb.Pipeline()
	for _, k := range keys {
		pipe.ZRem(ctx, mboxKey(k), members...)
	}
	if len(res.applied) > 0 {
		if msg, err := requests.DoneMessage(res.applied); err != nil {
			e.log.Warn("cannot announce outcomes; long polls will read them", "keys", keys, "err", err)
		} else {
			pipe.Publish(ctx, requests.DoneChannel, msg)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		e.log.Warn("mailbox cleanup failed", "keys", keys, "err", err)
	}
	if len(res.applied) == 0 {
		return
	}
	e.m.BatchSize.WithLabelValues(queue).Observe(float64(len(res.applied)))
	now := e.now()
	for i, r := range res.applied {
		code := "none"
		if p := res.outs[i].Problem; p != nil {
			code = p.Code
		}
		e.m.Completed.WithLabelValues(r.Type, string(res.outs[i].Status), code).Inc()
		e.m.Latency.WithLabelValues(r.Type).Observe(now.Sub(r.AcceptedAt).Seconds())
	}
}

// handOff releases l; if its mailbox still has entries, a new drain task
// carries on after delay. A lease that had already lapsed is handled as lost:
// tasks that arrived meanwhile may have left their requests to this holder.
func (e *Engine) handOff(ctx context.Context, l Lease, queue string, delay time.Duration) error {
	st, err := e.release(ctx, l, false)
	switch {
	case err != nil:
		return err
	case st == relLost:
		return e.lostLease(ctx, l, queue)
	case st != relNonEmpty:
		return nil
	}
	e.m.HandOffs.WithLabelValues(queue).Inc()
	return e.enqueueDrain(ctx, queue, l.Key, tokenID("h", l.Token), delay)
}

// lostLease handles a holder that found its lease gone. If nobody took the
// key over, the requests that arrived meanwhile have no task coming (theirs
// saw the lease held and finished), so a drain is enqueued; it does nothing
// if a new holder exists.
func (e *Engine) lostLease(ctx context.Context, l Lease, queue string) error {
	e.m.LeaseLost.WithLabelValues(queue).Inc()
	return e.enqueueDrain(context.WithoutCancel(ctx), queue, l.Key, tokenID("l", l.Token), 0)
}

// keepAlive extends the leases while an apply transaction runs, so a slow
// batch does not lose its key midway. A holder that stalls (or whose process
// freezes) stops extending and is fenced out once a successor commits.
func (e *Engine) keepAlive(ctx context.Context, leases []Lease) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(e.opt.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				for _, l := range leases {
					_ = extendScript.Run(ctx, e.rdb, []string{leaseKey(l.Key)}, l.Token, e.opt.LeaseTTL.Milliseconds()).Err()
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// giveUp hands the key on after a system error and returns the error so the
// task is retried and the failure shows in Asynqmon.
func (e *Engine) giveUp(ctx context.Context, l Lease, queue string, err error) error {
	if herr := e.handOff(context.WithoutCancel(ctx), l, queue, time.Second); herr != nil {
		e.log.Warn("hand off after error", "key", l.Key, "err", herr)
	}
	return err
}

func leaseKeys(ls []Lease) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Key
	}
	return out
}
