package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/probe"
)

func keyOf(i int) []string { return []string{fmt.Sprintf("k%d", i%10)} }

func requireExactlyOnce(t *testing.T, s *systest.System, n int) {
	t.Helper()
	require.Equal(t, map[domain.Status]int{domain.StatusSucceeded: n}, s.Statuses())
	total := int64(0)
	for i := range 10 {
		r := s.Probe(fmt.Sprintf("k%d", i))
		require.Empty(t, r.Violations(), "k%d", i)
		total += r.Counter
	}
	require.Equal(t, int64(n), total, "every effect applied exactly once")
}

// Durability: a 202 survives the loss of everything Redis held.
func TestDurableAcrossRedisFlushall(t *testing.T) {
	t.Parallel()
	redisURL, rdb := testenv.RedisServer(t)
	s := systest.Start(t, systest.Options{RedisURL: redisURL})
	const n = 300
	submitMany(t, s, 8, n, func(i int) probe.Payload { return probe.Payload{Keys: keyOf(i)} })

	require.NoError(t, rdb.FlushAll(context.Background()).Err())
	require.Zero(t, rdb.DBSize(context.Background()).Val(), "Redis lost every mailbox and task")

	// Two workers start together: both reconcile the same lost state at once.
	s.StartWorker("after-flush-1")
	s.StartWorker("after-flush-2")
	took := s.WaitAllTerminal(60 * time.Second)
	t.Logf("%d requests recovered from Postgres and applied in %s", n, took)
	requireExactlyOnce(t, s, n)
}

// K5: kill -9 of a worker process in the middle of work. Every accepted
// request still ends, applied exactly once, once the victim's leases lapse
// (LEASE_TTL is 2 s in tests). The minute it is given is a bound for a
// stuck run, not the property: how long recovery takes is measured by
// make bench (docs/benchmarks.md).
func TestK5WorkerKilledMidWork(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Overrides: []string{"BATCH_MAX", "16"}})
	const n = 600
	submitMany(t, s, 8, n, func(i int) probe.Payload { return probe.Payload{Keys: keyOf(i), SleepMs: 5} })
	victim := s.StartWorkerProcess("victim")

	// Kill the victim while it is applying: once some but not all are done.
	require.Eventually(t, func() bool {
		var victims int
		_ = s.Pool.QueryRow(context.Background(), `SELECT count(*) FROM probe_log WHERE worker = 'victim'`).Scan(&victims)
		return victims > 20
	}, 60*time.Second, 5*time.Millisecond)
	s.StartWorkerProcess("survivor")
	require.NoError(t, victim.Kill())
	killedAt := time.Now()
	open := n - s.Statuses()[domain.StatusSucceeded]
	t.Logf("killed the victim with %d requests still open", open)
	require.Positive(t, open, "the kill should land mid-work")

	s.WaitAllTerminal(time.Minute)
	t.Logf("all %d requests terminal %s after the kill", n, time.Since(killedAt).Round(time.Millisecond))
	requireExactlyOnce(t, s, n)
}

// Graceful shutdown: SIGTERM under load loses nothing; the worker hands its
// keys back and a new worker finishes.
func TestGracefulShutdownUnderLoad(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Overrides: []string{"BATCH_MAX", "16"}})
	const n = 600
	submitMany(t, s, 8, n, func(i int) probe.Payload { return probe.Payload{Keys: keyOf(i), SleepMs: 5} })
	w := s.StartWorkerProcess("leaving")
	require.Eventually(t, func() bool { return s.Statuses()[domain.StatusSucceeded] > 50 }, 60*time.Second, 5*time.Millisecond)
	start := time.Now()
	require.NoError(t, w.Terminate(20*time.Second), "worker exits cleanly on SIGTERM")
	t.Logf("worker stopped in %s", time.Since(start).Round(time.Millisecond))
	open := n - s.Statuses()[domain.StatusSucceeded]
	require.Positive(t, open, "the shutdown should land mid-work")

	s.StartWorker("next")
	s.WaitAllTerminal(30 * time.Second)
	requireExactlyOnce(t, s, n)
}
