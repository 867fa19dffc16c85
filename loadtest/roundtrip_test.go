package loadtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/bench/baseline"
	"github.com/holdfast/holdfast/internal/testenv"
)

// baseline-roundtrip follows every write to the plain round trip of
// cmd/baseline (the roundtrip mode and its roundtrip-tasks worker) to its
// outcome, with clients waiting for each and with all
// submitted first (-intake). The control: with the server's task queue
// paused, no write reaches its outcome before the run's deadline, and the
// report says each was lost.
func TestBaselineRoundTripFollowsEveryWriteToItsOutcome(t *testing.T) {
	t.Parallel()
	const users = 300
	// Pub/sub ignores Redis' database numbers: a queue, and so an
	// announcement channel, of this test's own.
	queue := fmt.Sprintf("loadtest-roundtrip-%d", time.Now().UnixNano())
	url, rdb := startRoundTrip(t, queue)
	for _, intake := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		rep, err := Run(ctx, "baseline-roundtrip", Options{BaseURL: url, Secret: "x", Users: users, Concurrency: 20, Intake: intake})
		require.NoError(t, err)
		require.True(t, rep.OK, "intake=%v: %v", intake, rep.Violations)
		require.Equal(t, map[string]int{"roundtrip succeeded": users}, rep.Outcomes, "intake=%v", intake)
		require.Equal(t, users, rep.Accepted)
	}

	require.NoError(t, asynq.NewInspectorFromRedisClient(rdb).PauseQueue(queue))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rep, err := Run(ctx, "baseline-roundtrip", Options{BaseURL: url, Secret: "x", Users: 5, Concurrency: 5, Intake: true})
	require.NoError(t, err)
	require.False(t, rep.OK)
	require.Empty(t, rep.Outcomes)
	require.Equal(t, 5, rep.Accepted)
	require.Contains(t, strings.Join(rep.Violations, "\n"), "no terminal state")
}

// startRoundTrip serves cmd/baseline's roundtrip mode and its
// roundtrip-tasks worker for the test, and returns the URL and Redis of the
// first.
func startRoundTrip(t *testing.T, queue string) (string, redis.UniversalClient) {
	t.Helper()
	_, pool := testenv.Postgres(t)
	_, rdb := testenv.Redis(t)
	var url string
	for _, mode := range []baseline.Mode{baseline.RoundTripTasks, baseline.RoundTrip} {
		srv, err := baseline.New(pool, rdb, baseline.Options{Mode: mode, Queue: queue, ShutdownTimeout: time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, srv.Close()) }) // after Serve's cleanup: cleanups run last first
		url = testenv.Serve(t, srv.Serve)
	}
	return url, rdb
}
