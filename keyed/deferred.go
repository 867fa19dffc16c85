package keyed

import (
	"context"
	"errors"
	"time"

	"github.com/hibiken/asynq"

	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/tasks"
)

// Deferred tasks. The task of a request that something else applies first
// (see deferral) is there so that Asynqmon shows the request (K1); running
// it is a no-op. Two ways to keep it out of the worker's way while the rush
// lasts, chosen by Options.ScheduleDeferred:
//
//   - aggregate (the default): the task waits in its queue's Asynq group
//     DeferredGroup (Asynqmon's "Aggregating" tab) and the worker's
//     aggregator folds up to deferredGroupMax of them into one task,
//     tasks.TypeDeferred, that drains each distinct first key once.
//   - schedule: the task is scheduled a minute or more ahead and runs by
//     itself, a drain attempt on its first key.
//
// Measured (scripts/ab.sh, fcfs-rush of 40,000 users, two pairs against
// scheduling): the deferred tasks' CPU, once the run was over, went from
// 0.280–0.284 ms a write (Redis 0.102–0.106, worker 0.176–0.179) to
// 0.007–0.011 ms, and Redis' all-in CPU a write from 0.173–0.177 ms to
// 0.072–0.089 ms; the folds made during the run are in the latter.
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
func (e *Engine) Aggregation(cfg *asynq.Config) {
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
// distinct first key. A task whose payload does not decode adds no key (it
// would have failed alone as well; its request is the reconciler's).
func aggregateDeferred(_ string, ts []*asynq.Task) *asynq.Task {
	seen := make(map[string]bool)
	var keys []string
	for _, t := range ts {
		var p tasks.RequestPayload
		if tasks.Decode(t, &p) != nil || len(p.Keys) == 0 {
			continue
		}
		if k := requests.NormalizeKeys(p.Keys)[0]; !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return tasks.NewDeferred(keys, len(ts))
}

// handleDeferred drains each key of an aggregated task, as each of its
// requests' tasks would have: a key held is left to its holder, an idle
// key with requests left (its holder died) is drained now.
func (e *Engine) handleDeferred(ctx context.Context, t *asynq.Task) error {
	var p tasks.DeferredPayload
	if err := tasks.Decode(t, &p); err != nil {
		return err
	}
	q, _ := asynq.GetQueueName(ctx)
	var errs []error
	for _, k := range p.Keys {
		errs = append(errs, e.Drain(ctx, k, q))
	}
	return errors.Join(errs...)
}
