package keyed

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/requests"
)

// reconcileKeys bounds how many keys one reconcile pass looks at.
const reconcileKeys = 1000

// Reconcile re-drives work that has no live owner (SPEC §7, K5): for every key
// with requests open longer than RedriveAfter and no lease held, it restores
// mailbox entries and tasks that Redis lost and enqueues a drain. Every step
// is idempotent, so any number of replicas may run it at once.
func (e *Engine) Reconcile(ctx context.Context) error {
	cutoff := e.now().Add(-e.opt.RedriveAfter)
	keys, err := e.store.OpenKeys(ctx, cutoff, reconcileKeys)
	if err != nil {
		return err
	}
	bucket := "r" + strconv.FormatInt(e.now().UnixMilli()/1000, 10)
	var errs []error
	for _, k := range keys {
		if !e.opt.Unguarded {
			held, err := e.rdb.Exists(ctx, leaseKey(k.Key)).Result()
			if err != nil {
				return fmt.Errorf("keyed: reconcile %s: %w", k.Key, err)
			}
			if held == 1 {
				continue
			}
		}
		if err := e.restore(ctx, k); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := e.enqueueDrain(ctx, k.Queue, k.Key, bucket, 0); err != nil {
			errs = append(errs, err)
			continue
		}
		e.m.Takeovers.WithLabelValues(k.Queue).Inc()
		e.log.Info("re-drove key without a live holder", "key", k.Key, "open", k.Count)
	}
	return errors.Join(errs...)
}

// restore puts back the mailbox entries and tasks of key's open requests that
// Redis no longer has. It samples the oldest entries first, so a key whose
// mailbox is intact costs one round trip.
func (e *Engine) restore(ctx context.Context, k requests.OpenKey) error {
	const page = 500
	var after int64
	for first := true; ; first = false {
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
		}
		if first && lost == 0 || len(open) < page {
			return nil
		}
		after = open[len(open)-1].Seq
	}
}
