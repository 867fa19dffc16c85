package loadtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
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
