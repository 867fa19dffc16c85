package keyed

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/storage"
)

// result is what one apply transaction did.
type result struct {
	tried   []*requests.Request // the requests picked for the transaction
	applied []*requests.Request // the same, once committed
	outs    []requests.Outcome
	gone    []string // peeked entries that were already terminal, unknown or no ids
}

type pickFunc func(open []*requests.Request, limit int) []*requests.Request

// applyRetrying runs apply transactions until one commits. Its switch
// classifies a failed one's error, and says what follows:
//   - a fenced lease whose Redis entry is still ours (Redis lost the key's
//     fence, or its clock is behind: doc.go, "Forgetting") is re-issued,
//     once per key (reissueFenced);
//   - an earlier request on the keys, durable but missing from its
//     mailbox, is put back there, and the caller reads again;
//   - a transient failure (connection, serialization, deadlock, Redis) is
//     retried after a pause, three times, then returned: the key is handed
//     on and the task retried later, and the request is never marked
//     failed for it;
//   - any other failure (an applier's, or one of the transaction's own
//     statements' that is not transient) is taken to come from some request
//     in the batch, which is halved until that request is alone; one that
//     fails alone twice is recorded as failed, so it cannot block its key
//     (isolate).
//
// It works on the group's state: a re-issued lease replaces the one held,
// and g.limit, the batch size, is halved while a failing request is
// isolated and doubled back after each success, up to BatchMax.
func (g *group) applyRetrying(ctx context.Context, ids []uuid.UUID, pick pickFunc) (result, error) {
	e, leases := g.e, g.leases()
	reissued := map[string]bool{}
	backOffs, aloneFailures := 0, 0
	for {
		stop := e.keepAlive(ctx, func() []Lease { return append(slices.Clip(leases), g.wait.gifts()...) })
		res, err := e.attempt(ctx, leases, ids, pick, g.limit, nil)
		stop()
		var fenced *fencedError
		switch {
		case err == nil:
			g.limit = min(g.limit*2, e.opt.BatchMax)
			return res, nil
		case errors.As(err, &fenced):
			if err := g.reissueFenced(ctx, leases, fenced.key, reissued); err != nil {
				return res, err
			}
		case ctx.Err() != nil, errors.Is(err, ErrLeaseLost): // ErrLeaseLost: an applier's own fenced script
			return res, err
		case errors.Is(err, errOvertaking):
			return result{}, e.Redispatch(ctx, g.keys()) // the earlier request sorts first by seq
		case transient(err):
			if backOffs++; backOffs > 3 {
				return res, err
			}
			e.log.Warn("apply failed, retrying", "keys", g.keys(), "try", backOffs, "err", err)
			sleep(ctx, time.Duration(25<<(2*(backOffs-1)))*time.Millisecond, nil)
		case len(res.tried) == 0:
			return res, err
		default:
			if g.isolate(res, err, &aloneFailures) {
				return e.attempt(ctx, leases, []uuid.UUID{res.tried[0].ID}, pick, 1, err)
			}
		}
	}
}

// reissueFenced re-issues the lease of key, which a fence refused, in
// leases and in the group, unless it was re-issued once already
// (reissued): then the lease is lost.
func (g *group) reissueFenced(ctx context.Context, leases []Lease, key string, reissued map[string]bool) error {
	if reissued[key] {
		return ErrLeaseLost
	}
	reissued[key] = true
	i := slices.IndexFunc(leases, func(l Lease) bool { return l.Key == key })
	l, err := g.e.reissue(ctx, leases[i])
	if err != nil {
		return err
	}
	leases[i], g.held[l.Key] = l, l
	return nil
}

// isolate halves the batch after a failure taken to come from one of its
// requests, and reports whether that request is alone and failed alone
// twice (aloneFailures): then it is to be recorded as failed.
func (g *group) isolate(res result, err error, aloneFailures *int) (failed bool) {
	g.e.log.Warn("applier failed; isolating the request", "keys", g.keys(), "batch", len(res.tried), "err", err)
	if len(res.tried) > 1 {
		g.limit = len(res.tried) / 2
		return false
	}
	*aloneFailures++
	if *aloneFailures < 2 {
		return false
	}
	g.limit = 1
	return true
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
	if errors.Is(err, errUnknownType) || storage.Unavailable(err) || pgconn.SafeToRetry(err) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code[:2] == "55" // lock not available (a rollback, class 40, is Unavailable)
	}
	var redisErr redis.Error
	return errors.As(err, &redisErr)
}

type fencedError struct{ key string }

func (f *fencedError) Error() string { return ErrFenced.Error() + ": " + f.key }
func (f *fencedError) Unwrap() error { return ErrFenced }

// attempt is one apply transaction: lock the open requests among ids, check
// the fences of the picked ones' keys, apply them and record their outcomes.
// With failWith set, the picked requests are recorded as failed instead.
// Every transaction takes its request rows first, in seq order, and its
// fence rows after, in key order: one that waits for a request row holds
// no fence row, so two cannot wait for each other.
func (e *Engine) attempt(ctx context.Context, leases []Lease, ids []uuid.UUID, pick pickFunc, limit int, failWith error) (result, error) {
	var res result
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("keyed: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	open, err := requests.LockOpen(ctx, tx, ids)
	if err != nil {
		return res, err
	}
	res.gone = missing(ids, open)
	batch := pick(open, limit)
	res.tried = batch
	if len(batch) == 0 {
		return res, nil
	}
	picked := make([]uuid.UUID, len(batch))
	through := map[string]int64{} // each key of the batch, to its last request's seq: K2 and K3 are per key
	for i, r := range batch {
		picked[i] = r.ID
		for _, k := range r.Keys {
			through[k] = r.Seq // the batch is in seq order
		}
	}
	if err := fence(ctx, tx, leases, through, e.opt.ForgetAfter); err != nil {
		return res, err
	}
	waiting, now, err := requests.UndispatchedBefore(ctx, tx, through, picked)
	switch {
	case err != nil:
		return res, err
	case waiting:
		return res, errOvertaking
	}
	var outs []requests.Outcome
	var applied []*Batch
	if failWith != nil {
		e.log.Error("request failed after retries", "requestId", batch[0].ID, "traceId", batch[0].TraceID, "err", failWith)
		outs = []requests.Outcome{requests.Failed("the request could not be applied after retries")}
	} else if outs, applied, err = e.apply(ctx, tx, leases, batch, now); err != nil {
		return res, err
	}
	if err := requests.Complete(ctx, tx, batch, outs, now); err != nil {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("keyed: commit: %w", err)
	}
	for _, b := range applied {
		b.Committed(ctx)
	}
	res.applied, res.outs = batch, outs
	return res, nil
}

// apply hands each run of same-type requests to its type's applier, and
// returns the outcomes and the batches it made.
func (e *Engine) apply(ctx context.Context, tx pgx.Tx, leases []Lease, batch []*requests.Request, now time.Time) ([]requests.Outcome, []*Batch, error) {
	fences := make(map[string]int64, len(leases))
	for _, l := range leases {
		fences[l.Key] = l.Token
	}
	outs := make([]requests.Outcome, 0, len(batch))
	var batches []*Batch
	for i := 0; i < len(batch); {
		j := i + 1
		for j < len(batch) && e.oneRun(batch[i].Type, batch[j].Type) {
			j++
		}
		t, ok := e.types[batch[i].Type]
		if !ok {
			return nil, nil, fmt.Errorf("%w: %s", errUnknownType, batch[i].Type)
		}
		b := &Batch{Requests: batch[i:j], Fences: fences, Now: now, Worker: e.opt.Worker}
		o, err := safeApply(ctx, t.Applier, tx, b)
		if err != nil {
			return nil, nil, fmt.Errorf("keyed: apply %s: %w", t.Name, err)
		}
		if len(o) != j-i {
			return nil, nil, fmt.Errorf("keyed: %s returned %d outcomes for %d requests", t.Name, len(o), j-i)
		}
		outs = append(outs, o...)
		batches = append(batches, b)
		i = j
	}
	return outs, batches, nil
}

// oneRun reports whether requests of types a and b go to an applier in one
// call: they are of one type, or of one family.
func (e *Engine) oneRun(a, b string) bool {
	f := e.types[a].Family
	return a == b || f != "" && f == e.types[b].Family
}

func safeApply(ctx context.Context, a Applier, tx pgx.Tx, b *Batch) (outs []requests.Outcome, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("applier panic: %v", p)
		}
	}()
	return a.Apply(ctx, tx, b)
}

func missing(ids []uuid.UUID, open []*requests.Request) []string {
	have := make(map[uuid.UUID]bool, len(open))
	for _, r := range open {
		have[r.ID] = true
	}
	var out []string
	for _, id := range ids {
		if !have[id] {
			out = append(out, id.String())
		}
	}
	return out
}
