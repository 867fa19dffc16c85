package floor_test

import (
	"context"
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

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := floor.Run(ctx, floor.Options{RedisURL: url, Tasks: tasks, Concurrency: 16, Enqueuers: 8, Queue: "test-floor"})
	require.NoError(t, err)

	// Each task's sequence number is counted once, and a second delivery of
	// it as a duplicate.
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
