package keyed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/requests"
)

// Drain takes key's lease and applies its mailbox. If another process holds
// the lease, that holder will apply everything in the mailbox (it releases
// only atomically with finding it empty), so Drain returns at once.
func (e *Engine) Drain(ctx context.Context, key, queue string) error {
	l, ok, err := e.TryAcquire(ctx, key)
	if err != nil {
		return err
	}
	if !ok {
		e.m.LeaseBusy.WithLabelValues(queue).Inc()
		return nil
	}
	return e.drainHeld(ctx, l, queue)
}

func (e *Engine) drainHeld(ctx context.Context, l Lease, queue string) error {
	d := &drain{e: e, queue: queue, l: l, limit: e.opt.BatchMax}
	deadline := e.now().Add(e.opt.DrainSlice)
	for {
		if e.stopped() || ctx.Err() != nil || !e.now().Before(deadline) {
			return e.handOff(context.WithoutCancel(ctx), d.l, queue, 0)
		}
		ids, err := e.peek(ctx, d.l, e.peekSize())
		if err == nil && len(ids) == 0 {
			var st int
			if st, err = e.release(ctx, d.l, true); err == nil && st != relKept {
				return nil
			}
			continue
		}
		more := false
		if err == nil {
			more, err = d.step(ctx, ids)
		}
		switch {
		case errors.Is(err, ErrLeaseLost):
			return e.lostLease(ctx, d.l, queue)
		case err != nil:
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

// peekSize is how much of a mailbox one step reads. Unguarded drainers (the
// control case) read further so that concurrent ones find different requests.
func (e *Engine) peekSize() int {
	if e.opt.Unguarded {
		return e.opt.BatchMax * 16
	}
	return e.opt.BatchMax
}

// step applies the next batch from the head of the mailbox: the longest run
// of requests whose only key is the held one, or a single multi-key request.
// more is false when the holder gave the key up.
func (d *drain) step(ctx context.Context, ids []string) (more bool, err error) {
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
	if err := e.store.MarkProcessing(ctx, uids, e.now().UTC()); err != nil {
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

// result is what one apply transaction did.
type result struct {
	tried   []*requests.Request // the requests picked for the transaction
	applied []*requests.Request // the same, once committed
	outs    []requests.Outcome
	gone    []uuid.UUID       // peeked ids that were already terminal (or unknown)
	head    *requests.Request // first open request, when none was picked
}

type pickFunc func(open []*requests.Request, limit int) []*requests.Request

// applyRetrying runs apply transactions until one commits.
//   - A fenced lease whose Redis entry is still ours (Redis lost its token
//     counter) is re-issued, once per key.
//   - A transient failure (connection, serialization, deadlock, Redis) is
//     retried with backoff, then returned: the key is handed on and the task
//     retried later, and the request is never marked failed for it.
//   - Any other failure comes from an applier and some request in the batch:
//     the batch is halved until that request is alone; a request that fails
//     alone twice is recorded as failed, so it cannot block its key.
//
// limit is the batch size, narrowed here and regrown after each success.
func (e *Engine) applyRetrying(ctx context.Context, leases []Lease, ids []uuid.UUID, pick pickFunc, limit *int) ([]Lease, result, error) {
	reissued := map[string]bool{}
	transientTries, aloneFailures := 0, 0
	for {
		stop := e.keepAlive(ctx, leases)
		res, err := e.attempt(ctx, leases, ids, pick, *limit, nil)
		stop()
		var fenced *fencedError
		switch {
		case err == nil:
			*limit = min(*limit*2, e.opt.BatchMax)
			return leases, res, nil
		case errors.As(err, &fenced):
			if reissued[fenced.key] || e.opt.Unguarded {
				return leases, res, ErrLeaseLost
			}
			reissued[fenced.key] = true
			i := slices.IndexFunc(leases, func(l Lease) bool { return l.Key == fenced.key })
			nl, rerr := e.reissue(ctx, leases[i])
			if rerr != nil {
				return leases, res, rerr
			}
			leases[i] = nl
			continue
		case ctx.Err() != nil:
			return leases, res, err
		case errors.Is(err, errOvertaking):
			// An earlier request on these keys never reached its mailbox: put
			// it there (it sorts first by seq) and let the caller re-read.
			if rerr := e.Redispatch(ctx); rerr != nil {
				return leases, res, rerr
			}
			return leases, result{}, nil
		case transient(err):
			if transientTries++; transientTries > 3 {
				return leases, res, err
			}
			e.log.Warn("apply failed, retrying", "keys", leaseKeys(leases), "try", transientTries, "err", err)
			time.Sleep(time.Duration(25<<(2*(transientTries-1))) * time.Millisecond)
			continue
		case len(res.tried) == 0:
			return leases, res, err
		}
		e.log.Warn("applier failed; isolating the request", "keys", leaseKeys(leases), "batch", len(res.tried), "err", err)
		if len(res.tried) > 1 {
			*limit = len(res.tried) / 2
			continue
		}
		if aloneFailures++; aloneFailures < 2 {
			continue
		}
		*limit = 1
		res, ferr := e.attempt(ctx, leases, []uuid.UUID{res.tried[0].ID}, pick, 1, err)
		return leases, res, ferr
	}
}

// errOvertaking means the batch would be applied ahead of an earlier request
// on its keys that is durable but missing from the mailboxes.
var errOvertaking = errors.New("keyed: an earlier request on these keys is not dispatched yet")

// errUnknownType means this worker has no applier for a request's type (an
// older worker during a rolling deploy): hand the key to one that has.
var errUnknownType = errors.New("keyed: no applier for this type here")

// transient reports whether err is worth retrying later as it is, rather
// than a sign that a request cannot be applied.
func transient(err error) bool {
	if errors.Is(err, errUnknownType) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08", "40", "53", "55", "57", "58": // connection, rollback (serialization, deadlock), resources, lock, operator, system
			return true
		}
		return false
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	var redisErr redis.Error
	return errors.As(err, &redisErr)
}

type fencedError struct{ key string }

func (f *fencedError) Error() string { return ErrFenced.Error() + ": " + f.key }
func (f *fencedError) Unwrap() error { return ErrFenced }

// attempt is one apply transaction: check every lease's fence, lock the open
// requests among ids, apply the picked ones and record their outcomes. With
// failWith set, the picked requests are recorded as failed instead.
func (e *Engine) attempt(ctx context.Context, leases []Lease, ids []uuid.UUID, pick pickFunc, limit int, failWith error) (result, error) {
	var res result
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("keyed: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if !e.opt.Unguarded && !e.noFence {
		for _, l := range leases {
			if err := fence(ctx, tx, l); err != nil {
				if errors.Is(err, ErrFenced) {
					return res, &fencedError{key: l.Key}
				}
				return res, err
			}
		}
	}
	skipLimit := 0
	if e.opt.Unguarded {
		skipLimit = limit
	}
	open, err := requests.LockOpen(ctx, tx, ids, skipLimit)
	if err != nil {
		return res, err
	}
	if !e.opt.Unguarded {
		res.gone = missing(ids, open)
	}
	batch := pick(open, limit)
	res.tried = batch
	if len(batch) == 0 {
		if len(open) > 0 {
			res.head = open[0]
		}
		return res, nil
	}
	if !e.opt.Unguarded {
		waiting, err := requests.UndispatchedBefore(ctx, tx, leaseKeys(leases), batch[len(batch)-1].Seq)
		if err != nil {
			return res, err
		}
		if waiting {
			return res, errOvertaking
		}
	}
	now := e.now().UTC()
	var outs []requests.Outcome
	if failWith != nil {
		e.log.Error("request failed after retries", "requestId", batch[0].ID, "traceId", batch[0].TraceID, "err", failWith)
		outs = []requests.Outcome{requests.Failed("the request could not be applied after retries")}
	} else if outs, err = e.apply(ctx, tx, leases, batch, now); err != nil {
		return res, err
	}
	if err := requests.Complete(ctx, tx, batch, outs, now); err != nil {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("keyed: commit: %w", err)
	}
	res.applied, res.outs = batch, outs
	return res, nil
}

// apply hands each run of same-type requests to its type's applier.
func (e *Engine) apply(ctx context.Context, tx pgx.Tx, leases []Lease, batch []*requests.Request, now time.Time) ([]requests.Outcome, error) {
	fences := make(map[string]int64, len(leases))
	for _, l := range leases {
		fences[l.Key] = l.Token
	}
	outs := make([]requests.Outcome, 0, len(batch))
	for i := 0; i < len(batch); {
		j := i + 1
		for j < len(batch) && batch[j].Type == batch[i].Type {
			j++
		}
		t, ok := e.types[batch[i].Type]
		if !ok {
			return nil, fmt.Errorf("%w: %s", errUnknownType, batch[i].Type)
		}
		o, err := safeApply(ctx, t.Applier, tx, &Batch{Requests: batch[i:j], Fences: fences, Now: now, Worker: e.opt.Worker})
		if err != nil {
			return nil, fmt.Errorf("keyed: apply %s: %w", t.Name, err)
		}
		if len(o) != j-i {
			return nil, fmt.Errorf("keyed: %s returned %d outcomes for %d requests", t.Name, len(o), j-i)
		}
		outs = append(outs, o...)
		i = j
	}
	return outs, nil
}

func safeApply(ctx context.Context, a Applier, tx pgx.Tx, b *Batch) (outs []requests.Outcome, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("applier panic: %v", p)
		}
	}()
	return a.Apply(ctx, tx, b)
}

// finish removes applied and stale ids from the mailboxes of keys, announces
// the outcomes and records metrics. A failure here is harmless: stale
// entries are skipped as terminal next time, and long-polls re-read Postgres.
func (e *Engine) finish(ctx context.Context, queue string, res result, keys []string) {
	if len(res.applied)+len(res.gone) == 0 {
		return
	}
	members := make([]any, 0, len(res.applied)+len(res.gone))
	done := make([]string, 0, len(res.applied))
	for _, r := range res.applied {
		members = append(members, r.ID.String())
		done = append(done, r.ID.String())
	}
	for _, id := range res.gone {
		members = append(members, id.String())
	}
	pipe := e.rdb.Pipeline()
	for _, k := range keys {
		pipe.ZRem(ctx, mboxKey(k), members...)
	}
	if len(done) > 0 {
		pipe.Publish(ctx, requests.DoneChannel, strings.Join(done, ","))
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
// carries on after delay.
func (e *Engine) handOff(ctx context.Context, l Lease, queue string, delay time.Duration) error {
	st, err := e.release(ctx, l, false)
	if err != nil || st != relNonEmpty {
		return err
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
	if e.opt.Unguarded {
		return func() {}
	}
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

func missing(ids []uuid.UUID, open []*requests.Request) []uuid.UUID {
	have := make(map[uuid.UUID]bool, len(open))
	for _, r := range open {
		have[r.ID] = true
	}
	var out []uuid.UUID
	for _, id := range ids {
		if !have[id] {
			out = append(out, id)
		}
	}
	return out
}

func leaseKeys(ls []Lease) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Key
	}
	return out
}
