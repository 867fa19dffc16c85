package floor_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/bench/floor"
	"github.com/holdfast/holdfast/internal/testenv"
)

func TestRunHandlesEveryTaskOnce(t *testing.T) {
	t.Parallel()
	url, rdb := testenv.Redis(t)
	const tasks = 2000

	var deliveries atomic.Int64
	var mu sync.Mutex
	seen := make(map[int]int, tasks)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := floor.Run(ctx, floor.Options{
		RedisURL: url, Tasks: tasks, Concurrency: 16, Enqueuers: 8, Queue: "test-floor",
		OnProcessed: func(seq int) {
			deliveries.Add(1)
			mu.Lock()
			seen[seq]++
			mu.Unlock()
		},
	})
	require.NoError(t, err)

	require.EqualValues(t, tasks, deliveries.Load(), "deliveries")
	require.Len(t, seen, tasks, "distinct tasks")
	for seq, n := range seen {
		require.Equal(t, 1, n, "task %d handled %d times", seq, n)
	}
	require.Equal(t, tasks, res.Processed)
	require.Zero(t, res.Duplicates)
	require.Positive(t, res.EnqueuePerSec)
	require.Positive(t, res.ProcessedPerSec)
	require.Positive(t, res.TotalSeconds)
	t.Logf("%d tasks: enqueue %.0f/s, processed %.0f/s, %.2fs", tasks, res.EnqueuePerSec, res.ProcessedPerSec, res.TotalSeconds)

	// The run leaves nothing of its queue behind.
	keys, err := rdb.Keys(context.Background(), "asynq:{"+res.Queue+"}:*").Result()
	require.NoError(t, err)
	require.Empty(t, keys)
	queues, err := rdb.SMembers(context.Background(), "asynq:queues").Result()
	require.NoError(t, err)
	require.NotContains(t, queues, res.Queue)
}
