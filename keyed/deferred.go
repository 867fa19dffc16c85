package keyed

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/tasks"
)

// Deferred tasks. The task of a request that something else applies first
// (see deferral) is there so that Asynqmon shows the request (K1); running
// it is a no-op. Two ways to keep it out of the worker's way while the rush
// lasts, chosen by Options.ScheduleDeferred (AGGREGATE_DEFERRED_TASKS).
// Folding is where K1's "one task a write" gives way: a request's task is
// listed under its id only until it is folded; the fold then stands for it
// in Asynqmon, by count. Scheduling keeps each request's own task.
//
//   - aggregate (the default): the task waits in its queue's Asynq group
//     DeferredGroup (Asynqmon's "Aggregating" tab) and the worker's
//     aggregator folds up to deferredGroupMax of them into one task,
//     tasks.TypeDeferred, that drains each distinct first key once. While
//     any of its requests still waits in a mailbox, the fold stays in the
//     queue, scheduled to look again every second with the count of its
//     keys' mailbox entries up to its last request: Asynqmon shows the
//     backlog until it is applied (K1), as the requests' own tasks did.
//   - schedule: the task is scheduled a minute or more ahead and runs by
//     itself, a drain attempt on its first key.
//
// Folding spares Redis and the worker most of what the deferred tasks cost
// when each runs by itself (docs/benchmarks.md, "Measured speed-ups").
const DeferredGroup = "deferred"

// The worker's aggregation settings: a group is folded once it holds
// deferredGroupMax tasks, once no task joined it for a second, or at the
// latest deferredGroupWait after its oldest joined. The aggregator checks
// every second and folds at most deferredGroupMax tasks a check a queue, so
// during a rush above that rate the group grows (bounded, with everything
// else deferred, by QUEUE_CAP: Admit counts aggregating tasks) and is worked
// off after it.
const (
	deferredGroupMax   = 10_000
	deferredGroupGrace = time.Second
	deferredGroupWait  = 10 * time.Second
)

// Aggregation sets cfg's group settings to fold the deferred tasks. Every
// worker sets them whatever the API's ScheduleDeferred, so APIs of either
// setting can share the workers.
func Aggregation(cfg *asynq.Config) {
	cfg.GroupGracePeriod = deferredGroupGrace
	cfg.GroupMaxDelay = deferredGroupWait
	cfg.GroupMaxSize = deferredGroupMax
	cfg.GroupAggregator = asynq.GroupAggregatorFunc(aggregateDeferred)
}

// laterOption is how r's task waits when it is deferred by delay.
func (e *Engine) laterOption(delay time.Duration) asynq.Option {
	if e.opt.ScheduleDeferred {
		return asynq.ProcessIn(delay)
	}
	return asynq.Group(DeferredGroup)
}

// aggregateDeferred folds a group's request tasks into one drain of each
// distinct first key, through the highest seq of its requests there. A
// task whose payload does not decode adds no key (it would have failed
// alone as well; its request is the reconciler's).
func aggregateDeferred(_ string, ts []*asynq.Task) *asynq.Task {
	at := make(map[string]int)
	p := tasks.DeferredPayload{Requests: len(ts)}
	for _, t := range ts {
		var r tasks.RequestPayload
		if tasks.Decode(t, &r) != nil || len(r.Keys) == 0 {
			continue
		}
		k := requests.NormalizeKeys(r.Keys)[0]
		i, ok := at[k]
		if !ok {
			i, at[k] = len(p.Keys), len(p.Keys)
			p.Keys, p.Through = append(p.Keys, k), append(p.Through, 0)
		}
		p.Through[i] = max(p.Through[i], r.Seq)
	}
	return tasks.NewDeferred(p)
}

// deferredRecheck is how long a fold whose requests still wait behind a
// drain waits before it looks again.
const deferredRecheck = time.Second

// handleDeferred drains each key of a folded task, as each of its requests'
// tasks would have: a key held is left to its holder, an idle key with
// requests left (its holder died) is drained now. Requests that still wait
// behind a holder keep a fold of their own in the queue, scheduled to look
// again, so that Asynqmon shows the backlog until it is applied (K1), as
// their own tasks would have; its payload counts its keys' mailbox entries
// up to its last request on each, others' among them.
func (e *Engine) handleDeferred(ctx context.Context, t *asynq.Task) error {
	var p tasks.DeferredPayload
	if err := tasks.Decode(t, &p); err != nil {
		return err
	}
	if len(p.Through) != len(p.Keys) {
		return fmt.Errorf("deferred task: %d keys, %d seqs: %w", len(p.Keys), len(p.Through), asynq.SkipRetry)
	}
	q, _ := asynq.GetQueueName(ctx)
	var errs []error
	for _, k := range p.Keys {
		errs = append(errs, e.Drain(ctx, k, q))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	pipe := e.rdb.Pipeline()
	waiting := make([]*redis.IntCmd, len(p.Keys))
	for i, k := range p.Keys {
		waiting[i] = pipe.ZCount(ctx, mboxKey(k), "-inf", strconv.FormatInt(p.Through[i], 10))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("keyed: deferred: %w", err)
	}
	left := tasks.DeferredPayload{}
	for i, k := range p.Keys {
		if n := waiting[i].Val(); n > 0 {
			left.Keys, left.Through = append(left.Keys, k), append(left.Through, p.Through[i])
			left.Requests += int(n)
		}
	}
	if len(left.Keys) == 0 {
		return nil
	}
	if _, err := e.client.EnqueueContext(ctx, tasks.NewDeferred(left, asynq.Queue(q), asynq.ProcessIn(deferredRecheck))); err != nil {
		return fmt.Errorf("keyed: deferred: %w", err)
	}
	return nil
}
