package loadtest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/shop"
	"github.com/holdfast/holdfast/stays"
)

// A paused queue's tasks wait while a worker runs, and the watch counts
// none processed; once resumed, they all run and are counted. The control
// queue, not paused, has its tasks processed and counted at once.
func TestQueueWatchHoldsTheWorkersBackAndCounts(t *testing.T) {
	t.Parallel()
	url, opt := asynqRedis(t)
	cl := asynq.NewClient(opt)
	t.Cleanup(func() { _ = cl.Close() })
	insp := asynq.NewInspector(opt)
	t.Cleanup(func() { _ = insp.Close() })
	const n = 20
	enqueue := func(queue string) {
		for i := range n {
			_, err := cl.Enqueue(asynq.NewTask("noop", nil), asynq.Queue(queue), asynq.TaskID(fmt.Sprint(queue, i)))
			require.NoError(t, err)
		}
	}
	processedTotal := func(queue string) int {
		info, err := insp.GetQueueInfo(queue)
		require.NoError(t, err)
		return info.ProcessedTotal
	}
	ran := serveNoops(t, opt, 0, "held", "free")

	// The control: a queue watched but not paused.
	free, err := watchQueues(url, []string{"free"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = free.close() })
	enqueue("free")
	require.Eventually(t, func() bool { return processedTotal("free") == n }, 10*time.Second, 10*time.Millisecond)
	got, err := free.since()
	require.NoError(t, err)
	require.Equal(t, n, got, "control: an unpaused queue's tasks are processed and counted")

	held, err := watchQueues(url, []string{"held", "missing"})
	require.NoError(t, err)
	require.NoError(t, held.pause())
	enqueue("held")
	// Thirty of the worker's polls: that the paused queue's tasks did not
	// run is an absence, and nothing observable says the worker looked.
	time.Sleep(300 * time.Millisecond)
	got, err = held.since()
	require.NoError(t, err)
	require.Zero(t, got)
	require.Equal(t, int64(n), ran.Load(), "only the control's tasks ran")

	require.NoError(t, held.resume())
	require.Eventually(t, func() bool { return processedTotal("held") == n }, 10*time.Second, 10*time.Millisecond)
	got, err = held.since()
	require.NoError(t, err)
	require.Equal(t, n, got)
	require.NoError(t, held.close(), "closing after resume is safe")
	info, err := insp.GetQueueInfo("held")
	require.NoError(t, err)
	require.False(t, info.Paused)
}

// A queue paused by someone else makes the hold fail rather than measure
// something else, and the queue stays paused: the watch resumes only what
// it paused.
func TestQueueWatchRefusesAQueuePausedAlready(t *testing.T) {
	t.Parallel()
	url, opt := asynqRedis(t)
	insp := asynq.NewInspector(opt)
	t.Cleanup(func() { _ = insp.Close() })
	require.NoError(t, insp.PauseQueue("b"))

	w, err := watchQueues(url, []string{"a", "b"})
	require.NoError(t, err)
	require.ErrorContains(t, w.pause(), "pause queue b")
	require.NoError(t, w.close())
	require.NoError(t, insp.PauseQueue("a"), "a was resumed by close, so it can be paused again")
	require.Error(t, insp.PauseQueue("b"), "b is still paused")
}

// runDeferred fires every task left scheduled, waits until a worker has
// processed them all, and reports how many there were and the CPU they cost.
func TestRunDeferredFiresScheduledTasksAndWaitsForThem(t *testing.T) {
	t.Parallel()
	const n = 30
	url, opt, cl := laterNoops(t, n, asynq.ProcessIn(time.Hour))
	_, err := cl.Enqueue(asynq.NewTask("noop", nil), asynq.Queue("now"))
	require.NoError(t, err)
	_, err = cl.Enqueue(asynq.NewTask("noop", nil), asynq.Queue("other"), asynq.ProcessIn(time.Hour))
	require.NoError(t, err)

	ran := serveNoops(t, opt, 3*time.Millisecond, "later", "now", "other")

	d, err := runDeferred(context.Background(), url, []string{"later", "now", "missing"}, nil)
	require.NoError(t, err)
	require.Equal(t, n, d.Tasks)
	require.Equal(t, int64(n+1), ran.Load(), "every task ran before runDeferred returned")
	require.Positive(t, d.CPUSeconds[CPUTotal])
	insp := asynq.NewInspector(opt)
	t.Cleanup(func() { _ = insp.Close() })
	info, err := insp.GetQueueInfo("later")
	require.NoError(t, err)
	require.Zero(t, info.Scheduled+info.Pending+info.Active)
	info, err = insp.GetQueueInfo("other")
	require.NoError(t, err)
	require.Equal(t, 1, info.Scheduled, "a queue not named is left alone")
}

// Tasks waiting in a group are counted, and runDeferred returns once the
// aggregator folded them and the folded task ran.
func TestRunDeferredWaitsForAggregatingTasks(t *testing.T) {
	t.Parallel()
	const n = 30
	url, opt, _ := laterNoops(t, n, asynq.Group("deferred"))
	ran := serveNoops(t, opt, 3*time.Millisecond, "later")

	d, err := runDeferred(context.Background(), url, []string{"later"}, nil)
	require.NoError(t, err)
	require.Equal(t, n, d.Tasks)
	require.Equal(t, int64(1), ran.Load(), "the group ran as one task before runDeferred returned")
	require.Greater(t, d.Seconds, 0.5, "it waited for the aggregator's grace period")
	insp := asynq.NewInspector(opt)
	t.Cleanup(func() { _ = insp.Close() })
	info, err := insp.GetQueueInfo("later")
	require.NoError(t, err)
	require.Zero(t, info.Aggregating+info.Pending+info.Active)
}

// The tool fires the scheduled tasks of holdfast's queues and no others.
func TestQueuesAreTheVerticals(t *testing.T) {
	require.ElementsMatch(t, []string{stays.Queue, shop.Queue, events.Queue}, holdfastQueues)
}

// laterNoops enqueues n "noop" tasks on queue "later", each waiting as
// wait says, on a Redis database of the test's own; it returns that
// database's URL, Asynq's connection to it and the client.
func laterNoops(t *testing.T, n int, wait asynq.Option) (string, asynq.RedisConnOpt, *asynq.Client) {
	url, opt := asynqRedis(t)
	cl := asynq.NewClient(opt)
	t.Cleanup(func() { _ = cl.Close() })
	for i := range n {
		_, err := cl.Enqueue(asynq.NewTask("noop", nil), asynq.Queue("later"), wait, asynq.TaskID(fmt.Sprint(i)))
		require.NoError(t, err)
	}
	return url, opt, cl
}

// asynqRedis reserves a Redis database for the test: its URL, and Asynq's
// connection to it.
func asynqRedis(t *testing.T) (string, asynq.RedisConnOpt) {
	url, _ := testenv.Redis(t)
	opt, err := asynq.ParseRedisURI(url)
	require.NoError(t, err)
	return url, opt
}

// serveNoops runs an Asynq server on queues for the test, whose "noop"
// tasks each spin for busy (CPU to measure) and count themselves; a group's
// tasks are folded into one "noop" a second after the last joined.
func serveNoops(t *testing.T, opt asynq.RedisConnOpt, busy time.Duration, queues ...string) *atomic.Int64 {
	weights := map[string]int{}
	for _, q := range queues {
		weights[q] = 1
	}
	var ran atomic.Int64
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: 4, Queues: weights,
		TaskCheckInterval: 10 * time.Millisecond, Logger: quietLogger{}, GroupGracePeriod: time.Second,
		GroupAggregator: asynq.GroupAggregatorFunc(func(string, []*asynq.Task) *asynq.Task { return asynq.NewTask("noop", nil) })})
	mux := asynq.NewServeMux()
	mux.HandleFunc("noop", func(context.Context, *asynq.Task) error {
		for end := time.Now().Add(busy); time.Now().Before(end); {
		}
		ran.Add(1)
		return nil
	})
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)
	return &ran
}

type quietLogger struct{}

func (quietLogger) Debug(...any) {}
func (quietLogger) Info(...any)  {}
func (quietLogger) Warn(...any)  {}
func (quietLogger) Error(...any) {}
func (quietLogger) Fatal(...any) {}
