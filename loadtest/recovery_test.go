package loadtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/systest"
)

// recovery against a real holdfast whose victim is a worker process of its
// own, alone until it has applied a batch, so it holds every key when the
// tool kills it; a second worker, started then, applies what it left once
// its leases lapse. Every write ends seated, exactly once, and the run
// reports the kill, the writes open at it and the time to the last
// outcome. Without a process to kill it does not start.
//
// The kill lands mid-work by a barrier, not by luck: a trigger lets the
// first batches' seats through and holds every insert after them on an
// advisory lock the test keeps until the victim is dead.
func TestRecoveryKillsAWorkerMidWork(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Overrides: []string{"BATCH_MAX", "16"}})
	release := gateSeatsAfterTheFirst(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	victim := s.StartWorkerProcess("victim")
	metrics := victim.URL + "/metrics"
	opt := Options{BaseURL: s.URL, Secret: s.Cfg.JWTSecret, RedisURL: s.Vars["REDIS_URL"], Concurrency: 20,
		Users: 500, Keys: 10, VictimMetrics: metrics, LeaseTTL: s.Cfg.LeaseTTL}
	_, err := Run(ctx, "recovery", opt)
	require.EqualError(t, err, "recovery setup: recovery kills a worker mid-work: give its process id (-kill-pid)")

	opt.KillPID = victim.Cmd.Process.Pid
	wait := runInBackground(ctx, "recovery", opt)
	// The survivor comes once the victim is at work, or gone: killed by the
	// run, or dead of its own, which the run's verdict tells.
	require.Eventually(t, func() bool {
		v, err := scrapeSum(ctx, http.DefaultClient, metrics, victimBatches)
		return (err == nil && v > 0) || victim.Cmd.Process.Signal(syscall.Signal(0)) != nil
	}, time.Minute, 5*time.Millisecond, "the victim applied no batch, and the run did not kill it")
	s.StartWorker("survivor")
	require.Eventually(t, func() bool { return victim.Cmd.Process.Signal(syscall.Signal(0)) != nil }, time.Minute, 5*time.Millisecond,
		"the run killed the victim")
	release()
	rep, err := wait()
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Violations)
	require.Equal(t, map[string]int{"fcfs succeeded": 500}, rep.Outcomes)
	got := *rep.Recovery
	t.Logf("%s: %s (the run: %.1f s)", got.load(), got.measured(), rep.Seconds)
	require.True(t, got.Killed)
	require.Positive(t, got.VictimBatches)
	require.Positive(t, got.OpenAtKill)
	require.Positive(t, got.AllTerminalAfterKillSeconds)
	require.Equal(t, s.Cfg.LeaseTTL.Seconds(), got.LeaseTTLSeconds)
	require.Equal(t, RecoveryReport{Writes: 500, Keys: 10}, RecoveryReport{Writes: got.Writes, Keys: got.Keys})
	require.Eventually(t, func() bool { return victim.Cmd.Process.Signal(syscall.Signal(0)) != nil }, 10*time.Second, 10*time.Millisecond,
		"the victim is dead")
	require.ErrorIs(t, victim.Cmd.Process.Signal(syscall.Signal(0)), os.ErrProcessDone)
}

// gateSeatsAfterTheFirst lets the transactions that reserve seats while
// none is reserved yet through, and holds every later insert, inside its
// transaction, until the returned release is called: a trigger of the
// test's schema waits for an advisory lock the test holds on a connection
// of its own as soon as a seat another transaction reserved is there.
func gateSeatsAfterTheFirst(t *testing.T, s *systest.System) (release func()) {
	t.Helper()
	ctx := context.Background()
	lock := rand.Int64()
	for _, q := range []string{
		fmt.Sprintf(`CREATE FUNCTION seat_gate() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF EXISTS (SELECT 1 FROM seat_reservations WHERE xmin <> pg_current_xact_id()::xid) THEN
					PERFORM pg_advisory_xact_lock(%d);
				END IF;
				RETURN NEW;
			END $$`, lock),
		`CREATE TRIGGER seat_gate BEFORE INSERT ON seat_reservations FOR EACH ROW EXECUTE FUNCTION seat_gate()`,
	} {
		_, err := s.Pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	conn, err := s.Pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lock)
	require.NoError(t, err)
	var once sync.Once
	release = func() {
		once.Do(func() {
			_, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, lock)
			require.NoError(t, err)
			conn.Release()
		})
	}
	t.Cleanup(release)
	return release
}
