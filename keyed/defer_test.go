package keyed

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/tasks"
)

// deferModes runs test once with deferred tasks folded by the aggregator
// (the default) and once with each scheduled (ScheduleDeferred).
func deferModes(t *testing.T, test func(t *testing.T, schedule bool)) {
	for _, schedule := range []bool{false, true} {
		t.Run(fmt.Sprintf("ScheduleDeferred=%t", schedule), func(t *testing.T) {
			t.Parallel()
			test(t, schedule)
		})
	}
}

// requireDeferred checks that a task waits for later as its engine defers:
// in the aggregator's group, or scheduled a minute or more ahead.
func requireDeferred(t *testing.T, info *asynq.TaskInfo, schedule bool, msg string) {
	t.Helper()
	if schedule {
		require.Equal(t, asynq.TaskStateScheduled, info.State, msg)
		require.Greater(t, time.Until(info.NextProcessAt), 50*time.Second)
		return
	}
	require.Equal(t, asynq.TaskStateAggregating, info.State, msg)
	require.Equal(t, DeferredGroup, info.Group)
}

// A request that enters its key's mailbox while the key is held has its
// task deferred: the holder applies it, and its task only shows it in
// Asynqmon (K1). A request on an idle key rings the doorbell: its task is
// due at once. A request with several keys is deferred when any of them is
// held.
func TestTaskIsDeferredWhileItsKeyIsHeld(t *testing.T) {
	t.Parallel()
	deferModes(t, func(t *testing.T, schedule bool) {
		r := newDeferringRig(t, schedule)
		ctx := context.Background()
		e := r.engineTTL(t, "w", 8, holdingTTL)
		insp := asynq.NewInspectorFromRedisClient(r.rdb)
		task := func(id uuid.UUID) *asynq.TaskInfo {
			t.Helper()
			info, err := insp.GetTaskInfo("q", id.String())
			require.NoError(t, err)
			return info
		}

		idle := r.accept(t)
		require.Equal(t, asynq.TaskStatePending, task(idle).State, "an idle key's request is due at once")
		require.NoError(t, e.Drain(ctx, "k", "q"))

		l, ok, err := e.TryAcquire(ctx, "k")
		require.NoError(t, err)
		require.True(t, ok)
		held := []uuid.UUID{r.accept(t), r.accept(t)}
		for _, id := range held {
			requireDeferred(t, task(id), schedule, "the key's holder applies it")
		}
		require.NoError(t, e.drainHeld(ctx, l, "q"))
		got := r.applied(t)
		require.Len(t, got, 3)
		require.Equal(t, held, []uuid.UUID{got[1].ID, got[2].ID}, "applied by the holder, in order, without their tasks")
		require.Zero(t, r.rdb.Exists(ctx, leaseKey("k")).Val(), "the holder let go once the mailbox was empty")

		next := r.accept(t)
		require.Equal(t, asynq.TaskStatePending, task(next).State, "idle again: due at once")

		// A request whose first key is idle but another is held is left to
		// that holder as well, whose group gathers the first (group.go).
		z := holding(t, e, "z")
		multi := r.acceptOn(t, "a", "z")
		requireDeferred(t, task(multi), schedule, "the holder of z applies it")
		require.NoError(t, e.drainHeld(ctx, z, "q"))
		require.False(t, r.open(t, multi))
	})
}

// Races posts against a worker that runs only the tasks that are due (a
// real Asynq server that never folds a group): its drains take the key,
// apply the mailbox and let go over and over while requests arrive. Every
// request is applied without waiting for a deferred task, which would run
// a minute later or once folded.
func TestDeferredTasksLeaveNoRequestBehind(t *testing.T) {
	t.Parallel()
	deferModes(t, func(t *testing.T, schedule bool) {
		race := deferralRace(t, schedule)
		require.Empty(t, race.left, "requests left behind with their tasks deferred")
		require.Greater(t, race.deferred, 0, "tasks were deferred while the key was held")
		require.Greater(t, race.due, 1, "the key was free at times")
	})
}

// The control reads the lease before the request enters the mailbox, and
// plays the interleaving that order allows step by step: the request sees
// its key held, the holder lets go, the request lands in the mailbox with
// its task deferred and nothing due to apply it. (It once also ran the race
// above and needed it to strand a request; on a busy machine the race did
// not always happen, so the control now forces it.)
func TestDeferredTasksControlLeaseReadFirst(t *testing.T) {
	t.Parallel()
	deferModes(t, func(t *testing.T, schedule bool) {
		r := newDeferringRig(t, schedule)
		req := strandOne(t, r)
		info, err := asynq.NewInspectorFromRedisClient(r.rdb).GetTaskInfo("q", req.String())
		require.NoError(t, err)
		requireDeferred(t, info, schedule, "deferred on a lease read too early")
		require.Zero(t, r.rdb.Exists(context.Background(), leaseKey("k")).Val(), "no holder")
		require.Equal(t, []string{req.String()}, r.rdb.ZRange(context.Background(), mboxKey("k"), 0, -1).Val(),
			"left in the mailbox with nothing due to apply it")
	})
}

// strandOne plays the control's interleaving: it returns a request left in
// the mailbox of the idle key "k" with its task deferred.
func strandOne(t *testing.T, r *fenceRig) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	e := r.engineTTL(t, "w", 8, holdingTTL)
	l := holding(t, e, "k")
	intake := r.leaseReadingFirstEngine(t, "intake", func() {
		require.NoError(t, e.drainHeld(ctx, l, "q")) // the holder lets go
	})
	in := r.newIntake(intake)
	req, _, err := in.Accept(ctx, requests.Submission{Type: "fence.test", Queue: "q", UserID: "u", Keys: []string{"k"}})
	require.NoError(t, err)
	return req.ID
}

// A worker configured by Aggregation folds a group of deferred tasks into
// one, whose drain applies what their own tasks would have: here a request
// stranded as in the control above, beside deferred tasks whose requests
// were applied already.
func TestFoldedDeferredTasksDrainTheirKeys(t *testing.T) {
	t.Parallel()
	r := newDeferringRig(t, false) // folds, whatever the run's speed-ups
	ctx := context.Background()
	e := r.engineTTL(t, "w", 8, holdingTTL)
	l := holding(t, e, "k")
	applied := []uuid.UUID{r.accept(t), r.accept(t)}
	require.NoError(t, e.drainHeld(ctx, l, "q"))
	stranded := strandOne(t, r)

	cfg := asynq.Config{Concurrency: 2, Queues: map[string]int{"q": 1}, TaskCheckInterval: 10 * time.Millisecond,
		LogLevel: asynq.ErrorLevel}
	Aggregation(&cfg)
	srv := asynq.NewServerFromRedisClient(r.rdb, cfg)
	mux := asynq.NewServeMux()
	e.Handle(mux)
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)

	insp := asynq.NewInspectorFromRedisClient(r.rdb)
	require.Eventually(t, func() bool {
		info, err := insp.GetQueueInfo("q")
		return err == nil && info.Aggregating == 0 && info.Pending+info.Active == 0 && info.Processed > 0
	}, 20*time.Second, 20*time.Millisecond, "the group was not folded and run")
	info, err := insp.GetQueueInfo("q")
	require.NoError(t, err)
	require.Equal(t, 1, info.Processed, "three deferred tasks ran as one")
	var ids []uuid.UUID
	for _, a := range r.applied(t) {
		ids = append(ids, a.ID)
	}
	require.Equal(t, append(applied, stranded), ids, "the folded task drained the stranded request, in order")
}

// The folded task drains each distinct first key of its requests once,
// through the highest seq among them.
func TestAggregateDeferredKeepsEachFirstKeyOnce(t *testing.T) {
	t.Parallel()
	var ts []*asynq.Task
	for i, r := range []struct {
		keys []string
		seq  int64
	}{{[]string{"b", "a"}, 4}, {[]string{"a"}, 9}, {[]string{"c"}, 3}, {[]string{"c", "d"}, 2}, {nil, 11}} {
		tk, err := tasks.NewRequest("fence.test", "q", fmt.Sprint(i), r.keys, r.seq)
		require.NoError(t, err)
		ts = append(ts, tk)
	}
	ts = append(ts, asynq.NewTask("fence.test", []byte("{not json")))
	folded := aggregateDeferred(DeferredGroup, ts)
	require.Equal(t, tasks.TypeDeferred, folded.Type())
	var p tasks.DeferredPayload
	require.NoError(t, json.Unmarshal(folded.Payload(), &p))
	require.Equal(t, tasks.DeferredPayload{Keys: []string{"a", "c"}, Through: []int64{9, 3}, Requests: 6}, p)
}

// A fold whose requests still wait behind a holder stays in the queue,
// scheduled to look again and counting them, until they are applied (K1:
// Asynqmon shows the backlog); then it ends.
func TestFoldOutlivesNoneOfItsRequests(t *testing.T) {
	t.Parallel()
	r := newDeferringRig(t, false) // folds, whatever the run's speed-ups
	ctx := context.Background()
	e := r.engineTTL(t, "w", 8, holdingTTL)
	l := holding(t, e, "k")
	for range 3 {
		r.accept(t)
	}
	insp := asynq.NewInspectorFromRedisClient(r.rdb)
	members, err := insp.ListAggregatingTasks("q", DeferredGroup)
	require.NoError(t, err)
	require.Len(t, members, 3)
	folded := make([]*asynq.Task, len(members))
	for i, m := range members {
		folded[i] = asynq.NewTask(m.Type, m.Payload)
	}
	// What the aggregator does, to a worker that runs the tasks due (and
	// folds nothing itself).
	_, err = e.client.Enqueue(aggregateDeferred(DeferredGroup, folded), asynq.Queue("q"))
	require.NoError(t, err)
	srv := asynq.NewServerFromRedisClient(r.rdb, asynq.Config{Concurrency: 2, Queues: map[string]int{"q": 1},
		TaskCheckInterval: 10 * time.Millisecond, DelayedTaskCheckInterval: time.Hour, LogLevel: asynq.ErrorLevel})
	mux := asynq.NewServeMux()
	e.Handle(mux)
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)
	scheduled := func(n int) []*asynq.TaskInfo {
		t.Helper()
		var got []*asynq.TaskInfo
		require.Eventually(t, func() bool {
			info, err := insp.GetQueueInfo("q")
			if err != nil || info.Pending+info.Active > 0 {
				return false
			}
			got, err = insp.ListScheduledTasks("q")
			return err == nil && len(got) == n
		}, 20*time.Second, 10*time.Millisecond)
		return got
	}
	again := scheduled(1)
	var p tasks.DeferredPayload
	require.NoError(t, json.Unmarshal(again[0].Payload, &p))
	require.Equal(t, tasks.DeferredPayload{Keys: []string{"k"}, Through: p.Through, Requests: 3}, p,
		"the held key's requests keep a fold in the queue")

	require.NoError(t, e.drainHeld(ctx, l, "q"))
	_, err = insp.RunAllScheduledTasks("q")
	require.NoError(t, err)
	scheduled(0)
	require.Len(t, r.applied(t), 3)
	info, err := insp.GetQueueInfo("q")
	require.NoError(t, err)
	require.Equal(t, 2, info.Processed, "applied: the fold ended after its second look")
}

// holding takes key's lease on e for the test.
func holding(t *testing.T, e *Engine, key string) Lease {
	t.Helper()
	l, ok, err := e.TryAcquire(context.Background(), key)
	require.NoError(t, err)
	require.True(t, ok)
	return l
}

type raceResult struct {
	left          []uuid.UUID // accepted but not applied once the worker went idle
	deferred, due int         // tasks deferred; tasks the worker ran
}

// deferralRace accepts requests on key k from two clients (the second's
// on j too), in bursts,
// while an Asynq server runs the due tasks with the engine's handlers.
// After each burst it waits until the worker is idle and notes what was
// left: a request stranded early in a burst is rescued by the drain a later
// doorbell starts, so the end of each burst is where one would stay.
func deferralRace(t *testing.T, schedule bool) raceResult {
	t.Helper()
	r := newDeferringRig(t, schedule)
	ctx := context.Background()
	e := r.engineTTL(t, "w", 8, holdingTTL)
	intake := r.engine(t, "intake", 1)
	in := r.newIntake(intake)

	srv := asynq.NewServerFromRedisClient(r.rdb, asynq.Config{Concurrency: 4, Queues: map[string]int{"q": 1},
		TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.ErrorLevel})
	mux := asynq.NewServeMux()
	e.Handle(mux)
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)
	insp := asynq.NewInspectorFromRedisClient(r.rdb)
	idle := func() bool {
		info, err := insp.GetQueueInfo("q")
		if err != nil || info.Pending+info.Active > 0 {
			return false
		}
		held, err := r.rdb.Exists(ctx, leaseKey("j"), leaseKey("k")).Result()
		return err == nil && held == 0
	}

	const bursts, clients, each = 20, 2, 5
	// The second client's requests also name j, which sorts first: their
	// tasks are deferred when k alone is held, whose holder gathers j.
	keys := [clients][]string{{"k"}, {"j", "k"}}
	var res raceResult
	applied := map[uuid.UUID]bool{}
	for range bursts {
		ids := make([]uuid.UUID, clients*each)
		errs := make(chan error, len(ids))
		var accepts sync.WaitGroup
		for c := range clients {
			accepts.Go(func() {
				for i := c; i < len(ids); i += clients {
					req, _, err := in.Accept(ctx, requests.Submission{Type: "fence.test", Queue: "q", UserID: "u", Keys: keys[c]})
					if err != nil {
						errs <- err
						return
					}
					ids[i] = req.ID
					// Spread the accepts so they land between the worker's drains:
					// the timing is the input here, not a wait for anything.
					time.Sleep(rand.N(4 * time.Millisecond))
				}
			})
		}
		accepts.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool {
			if !idle() {
				return false
			}
			time.Sleep(50 * time.Millisecond) // idle for longer than a task check
			return idle()
		}, 20*time.Second, 5*time.Millisecond, "the worker did not go idle")
		for _, a := range r.applied(t) {
			applied[a.ID] = true
		}
		for _, id := range ids {
			if !applied[id] {
				res.left = append(res.left, id)
				applied[id] = true // counted once
			}
		}
	}
	info, err := insp.GetQueueInfo("q")
	require.NoError(t, err)
	res.deferred, res.due = info.Scheduled+info.Aggregating, info.Processed
	return res
}
