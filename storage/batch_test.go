package storage_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/storage"
)

// incrAll has n callers at once each add i to key i through pipelined,
// and returns, for each caller, its error or a wrong result.
func incrAll(n int, pipelined func(context.Context, func(redis.Pipeliner) error) error) []error {
	return testenv.AtOnce(n, func(i int) error {
		var cmd *redis.IntCmd
		err := pipelined(context.Background(), func(p redis.Pipeliner) error {
			cmd = p.IncrBy(context.Background(), "batch:"+strconv.Itoa(i), int64(i))
			return nil
		})
		if err == nil && cmd.Val() != int64(i) {
			err = errors.New("got " + strconv.FormatInt(cmd.Val(), 10))
		}
		return err
	})
}

func requireNoErrors(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		require.NoError(t, err, "caller %d", i)
	}
}

// holdFirst holds rdb's first pipeline that carries the command name at
// the hook, before it is sent, until release is called; held is closed
// once it is being held. Callers arriving meanwhile queue behind it, which
// makes a batch's membership independent of how the goroutines happen to
// be scheduled.
func holdFirst(rdb redis.UniversalClient, name string) (held <-chan struct{}, release func()) {
	h, r := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	rdb.AddHook(testenv.OnPipeline(func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		if slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == name }) && first.CompareAndSwap(false, true) {
			close(h)
			<-r
		}
		return next(ctx, cmds)
	}))
	return h, sync.OnceFunc(func() { close(r) })
}

// letQueue waits for the held pipeline and for want callers queued behind
// it, by waiting's count, and then releases it.
func letQueue(t *testing.T, held <-chan struct{}, release func(), waiting func() int, want int) {
	t.Helper()
	defer release()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("no pipeline reached Redis")
	}
	require.Eventually(t, func() bool { return waiting() == want }, 10*time.Second, time.Millisecond,
		"%d callers should queue behind the held pipeline", want)
}

// Concurrent callers' pipelines reach Redis together, each caller reading
// its own results: while the first caller's pipeline is on its way, the
// other 63 queue and then go in one pipeline. The control sends the same
// calls one pipeline each.
func TestBatcherSendsConcurrentPipelinesTogether(t *testing.T) {
	t.Parallel()
	_, rdb := testenv.Redis(t)
	sent := testenv.WatchRedis(rdb)
	const n = 64
	b := storage.NewBatcher(rdb)
	held, release := holdFirst(rdb, "incrby")

	done := make(chan []error)
	go func() { done <- incrAll(n, b.Pipelined) }()
	letQueue(t, held, release, b.Waiting, n-1)
	requireNoErrors(t, <-done)
	require.Equal(t, []int{1, n - 1}, sent.Pipelines("incrby"), "each command sent once, all but the first together")

	require.NoError(t, rdb.FlushDB(context.Background()).Err())
	sent.Reset()
	requireNoErrors(t, incrAll(n, func(ctx context.Context, fn func(redis.Pipeliner) error) error {
		_, err := rdb.Pipelined(ctx, fn)
		return err
	}))
	require.Len(t, sent.Pipelines("incrby"), n, "control: without the batcher, a pipeline per caller")
}

// Callers sharing a pipeline keep their own errors: a command of one that
// fails, or its fn's error, does not fail the others.
func TestBatcherKeepsEachCallersErrors(t *testing.T) {
	t.Parallel()
	_, rdb := testenv.Redis(t)
	ctx := context.Background()
	require.NoError(t, rdb.Set(ctx, "text", "not a number", 0).Err())
	sent := testenv.WatchRedis(rdb)
	b := storage.NewBatcher(rdb)
	held, release := holdFirst(rdb, "incr")

	// The first caller's pipeline is held, so the next three queue behind
	// it and go together.
	var wg sync.WaitGroup
	var first error
	wg.Go(func() {
		first = b.Pipelined(ctx, func(p redis.Pipeliner) error { p.Incr(ctx, "first"); return nil })
	})
	<-held
	errs := make([]error, 3)
	var good *redis.IntCmd
	fnErr := errors.New("fn refused")
	calls := []func(redis.Pipeliner) error{
		func(p redis.Pipeliner) error { p.Incr(ctx, "text"); return nil },
		func(p redis.Pipeliner) error { good = p.Incr(ctx, "counter"); return nil },
		func(p redis.Pipeliner) error { p.Incr(ctx, "other"); return fnErr },
	}
	for i, fn := range calls {
		wg.Go(func() { errs[i] = b.Pipelined(ctx, fn) })
	}
	letQueue(t, held, release, b.Waiting, len(calls))
	wg.Wait()

	require.NoError(t, first)
	require.ErrorContains(t, errs[0], "not an integer")
	require.NoError(t, errs[1])
	require.Equal(t, int64(1), good.Val())
	require.ErrorIs(t, errs[2], fnErr)
	require.Equal(t, []int{1, 3}, sent.Pipelines("incr"), "the first caller alone, then the three together")
}

// Asynq's client given BatchScripts enqueues concurrent tasks in shared
// round trips, every task arriving once: while the first enqueue is on its
// way, the other 47 queue and go in one pipeline. The control, Asynq on
// the plain client, sends one script call per task.
func TestBatchScriptsSharesAsynqEnqueues(t *testing.T) {
	t.Parallel()
	_, rdb := testenv.Redis(t)
	sent := testenv.WatchRedis(rdb)
	const n = 48
	scripts := []string{"evalsha", "eval"}
	batched := storage.BatchScripts(rdb)
	// enqueueAll enqueues n tasks at once on queue, and checks they all
	// arrived.
	enqueueAll := func(c *asynq.Client, queue string) []error {
		errs := testenv.AtOnce(n, func(i int) error {
			_, err := c.Enqueue(asynq.NewTask("t", nil, asynq.Queue(queue), asynq.TaskID(queue+strconv.Itoa(i))))
			return err
		})
		return errs
	}
	requirePending := func(queue string) {
		t.Helper()
		info, err := asynq.NewInspectorFromRedisClient(rdb).GetQueueInfo(queue)
		require.NoError(t, err)
		require.Equal(t, n, info.Pending)
	}
	client := asynq.NewClientFromRedisClient(batched)
	// One enqueue first, so that Redis has Asynq's script and every
	// measured enqueue is one EVALSHA.
	_, err := client.Enqueue(asynq.NewTask("t", nil, asynq.Queue("warm")))
	require.NoError(t, err)
	sent.Reset()
	held, release := holdFirst(rdb, "evalsha")

	done := make(chan []error)
	go func() { done <- enqueueAll(client, "batched") }()
	letQueue(t, held, release, func() int { return storage.ScriptsWaiting(batched) }, n-1)
	requireNoErrors(t, <-done)
	require.Zero(t, sent.Alone(scripts...))
	require.Equal(t, []int{1, n - 1}, sent.Pipelines(scripts...), "each task sent once, all but the first together")
	requirePending("batched")

	sent.Reset()
	requireNoErrors(t, enqueueAll(asynq.NewClientFromRedisClient(rdb), "plain"))
	require.GreaterOrEqual(t, sent.Alone(scripts...), n, "control: a script call per task")
	requirePending("plain")
}

// A caller whose fn panics gets the panic back in its own goroutine, and
// the Batcher is not left wedged: the caller that queued behind it runs,
// and so does a later one.
func TestBatcherSurvivesAPanickingCaller(t *testing.T) {
	t.Parallel()
	_, rdb := testenv.Redis(t)
	ctx := context.Background()
	b := storage.NewBatcher(rdb)
	panicked := make(chan any, 1)
	inFn := make(chan struct{})
	go func() {
		defer func() { panicked <- recover() }()
		_ = b.Pipelined(ctx, func(redis.Pipeliner) error {
			close(inFn)
			// Panic once the next caller has queued behind this batch.
			for deadline := time.Now().Add(10 * time.Second); b.Waiting() == 0 && time.Now().Before(deadline); {
				// A poll of Waiting, which has no channel; inside fn, off the
				// test's goroutine, where require.Eventually cannot fail the test.
				time.Sleep(time.Millisecond)
			}
			panic("fn broke")
		})
	}()
	<-inFn
	queued := make(chan error, 1)
	go func() {
		queued <- b.Pipelined(ctx, func(p redis.Pipeliner) error { p.Incr(ctx, "after"); return nil })
	}()
	require.Equal(t, "fn broke", <-panicked)
	select {
	case err := <-queued:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the caller queued behind the panic never ran")
	}
	var n *redis.IntCmd
	require.NoError(t, b.Pipelined(ctx, func(p redis.Pipeliner) error { n = p.Incr(ctx, "after"); return nil }))
	require.Equal(t, int64(2), n.Val())
}
