package keyed

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/storage"
)

// reconcilePage is how many keys one round trip of a reconcile pass checks;
// reconcileMaxKeys bounds one pass.
const (
	reconcilePage    = 500
	reconcileMaxKeys = 20_000
)

// Reconcile re-drives work that has no live owner (SPEC §7, K5). For every
// key with requests open longer than RedriveAfter it restores the mailbox
// entries and tasks Redis lost (a failed dispatch, a FLUSHALL), whether or not
// the key is held; and for each such key without a lease it enqueues a drain
// (its holder died). Every step is idempotent, so any number of replicas may
// run it at once.
func (e *Engine) Reconcile(ctx context.Context) error {
	// A request that cannot be re-dispatched must not keep the keys below
	// from being re-driven: its error is reported with theirs at the end.
	var errs []error
	if err := e.Redispatch(ctx, nil); err != nil {
		errs = append(errs, err)
	}
	bucket := "r" + strconv.FormatInt(time.Now().UnixMilli()/1000, 10)
	var after requests.OpenKey
	for read := 0; read < reconcileMaxKeys; read += reconcilePage {
		keys, err := e.store.OpenKeys(ctx, e.opt.RedriveAfter, after, reconcilePage)
		if err != nil {
			return err
		}
		pipe := e.rdb.Pipeline()
		held := make([]*redis.IntCmd, len(keys))
		present := make([]*redis.IntCmd, len(keys))
		for i, k := range keys {
			held[i] = pipe.Exists(ctx, leaseKey(k.Key))
			present[i] = pipe.ZCount(ctx, mboxKey(k.Key), "-inf", strconv.FormatInt(k.MaxSeq, 10))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("keyed: reconcile: %w", err)
		}
		for i, k := range keys {
			if present[i].Val() < k.Count {
				if err := e.restore(ctx, k); err != nil {
					errs = append(errs, err)
					continue
				}
			}
			if held[i].Val() == 1 {
				continue
			}
			if err := e.enqueueDrain(ctx, k.Queue, k.Key, bucket, 0); err != nil {
				errs = append(errs, err)
				continue
			}
			e.m.Takeovers.WithLabelValues(k.Queue).Inc()
			e.log.Info("re-drove key without a live holder", "key", k.Key, "open", k.Count)
		}
		if len(keys) < reconcilePage {
			break
		}
		after = keys[len(keys)-1]
	}
	return errors.Join(errs...)
}

// restore puts back the mailbox entries and tasks of key's open requests (up
// to k.MaxSeq) that Redis no longer has.
func (e *Engine) restore(ctx context.Context, k requests.OpenKey) error {
	const page = 500
	var after int64
	for after < k.MaxSeq {
		open, err := e.store.OpenOnKey(ctx, k.Key, after, page)
		if err != nil || len(open) == 0 {
			return err
		}
		members := make([]string, len(open))
		for i, r := range open {
			members[i] = r.ID.String()
		}
		scores, err := e.rdb.ZMScore(ctx, mboxKey(k.Key), members...).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("keyed: restore %s: %w", k.Key, err)
		}
		lost := 0
		for i, r := range open {
			if i < len(scores) && scores[i] != 0 {
				continue
			}
			lost++
			if err := e.Dispatch(ctx, r); err != nil {
				return err
			}
		}
		if lost > 0 {
			e.m.Redriven.WithLabelValues(k.Queue).Add(float64(lost))
			e.log.Warn("restored requests Redis had lost", "key", k.Key, "count", lost)
		}
		after = open[len(open)-1].Seq
	}
	return nil
}

// incarnationKey names the state Redis has held since it last lost it: a
// random id, gone with the rest of that state (a FLUSHALL, a restart or a
// failover without persistence).
const incarnationKey = "hf:incarnation"

// renewingKey holds the id of the renewal under way, which extends it while
// it marks: one drain renews at a time, and renewTTL after one died
// another takes over.
const (
	renewingKey = "hf:renewing"
	renewTTL    = 5 * time.Second
)

// renew starts an incarnation of Redis' state, at the first start or
// after one was lost. After a loss the mailboxes may lack entries of open
// requests, and a request accepted since would go first on its key, ahead
// of one whose 202 was answered before it was sent (K3). So every open
// request is first marked undispatched, as one whose dispatch failed at
// intake: no batch on its keys is applied past it until it is back in its
// mailbox (Redispatch, called at once by a batch that would overtake it,
// and by each reconcile pass). Only then is the incarnation set. A step
// applies nothing unless Redis had an incarnation right after its peeks,
// read in their round trip (group.peek). Whatever state the peeks saw, a
// loss before that read was followed by the marks, made before the
// incarnation was set again, and the batch's transaction, begun after the
// read, sees them (requests.UndispatchedBefore). Postgres remembers that
// Redis had an incarnation (redis_incarnation): without it, this is a
// first start, and nothing is marked. Drains that renew at once mark the
// same requests, and the first incarnation set stays. On Redis Cluster the
// incarnation's node tells nothing of the others, and order across a loss
// of a node's state is not kept.
//
// One drain renews at a time (renewingKey; the others look again). Redis
// may lose its state again while the marks are made: a request accepted
// after the marks began is then lost unmarked. That loss takes renewingKey
// too, and the incarnation is not set (renewedScript): the next look
// renews again, marking that request.
func (e *Engine) renew(ctx context.Context) (err error) {
	id := uuid.NewString()
	// Another drain may have renewed since the peeks, or be renewing.
	if ok, err := e.rdb.SetNX(ctx, renewingKey, id, renewTTL).Result(); err != nil {
		return fmt.Errorf("keyed: renew: %w", err)
	} else if !ok {
		return nil
	}
	stop := every(ctx, renewTTL/3, func(ctx context.Context) {
		_ = extendScript.Run(ctx, e.rdb, []string{renewingKey}, id, renewTTL.Milliseconds()).Err()
	})
	defer func() {
		stop()
		if err != nil { // let the next look renew at once
			_ = e.rdb.Del(context.WithoutCancel(ctx), renewingKey).Err()
		}
	}()
	if n, err := e.rdb.Exists(ctx, incarnationKey).Result(); err != nil {
		return fmt.Errorf("keyed: renew: %w", err)
	} else if n == 1 {
		return e.rdb.Del(ctx, renewingKey).Err()
	}
	var had bool
	if err := e.pool.QueryRow(ctx, `WITH was AS (SELECT 1 FROM redis_incarnation), now AS (
			INSERT INTO redis_incarnation (id) VALUES ($1) ON CONFLICT (one) DO UPDATE SET id = EXCLUDED.id)
		SELECT EXISTS (SELECT 1 FROM was)`, id).Scan(&had); err != nil {
		return storage.Translate("keyed: renew", err)
	}
	if had {
		if err := e.store.MarkOpenUndispatched(ctx); err != nil {
			return err
		}
		e.log.Warn("Redis lost its state: every open request is marked undispatched until it is back in its mailboxes")
	}
	if err := renewedScript.Run(ctx, e.rdb, []string{renewingKey, incarnationKey}, id).Err(); err != nil {
		return fmt.Errorf("keyed: renew: %w", err)
	}
	return nil
}

// Redispatch puts requests whose dispatch failed at intake into their
// mailboxes, oldest first: those on keys, or all of them when keys is nil.
// Both steps are idempotent; the requests keep their mark until they are
// applied (see requests.Store.Undispatched), so a later run may put them
// there again. A request that cannot be dispatched is logged and skipped, so
// one unreachable shard does not hold up the others.
func (e *Engine) Redispatch(ctx context.Context, keys []string) error {
	var after int64
	var errs []error
	for {
		rs, err := e.store.Undispatched(ctx, keys, after, 100)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		for _, r := range rs {
			if err := e.Dispatch(ctx, r); err != nil {
				e.log.Warn("re-dispatch failed; the next reconcile retries it", "requestId", r.ID, "err", err)
				errs = append(errs, err)
				continue
			}
			e.m.Redriven.WithLabelValues(r.Queue).Inc()
		}
		if len(rs) < 100 {
			return errors.Join(errs...)
		}
		after = rs[len(rs)-1].Seq
	}
}
