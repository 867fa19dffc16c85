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

	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/keyed"
)

// isolation against a real holdfast. With the hot event's lease held by a
// holder that applies nothing until the other keys' writes are applied,
// all of its backlog is still open when the last of them ends, and every
// one of them is timed; once the lease is let go, the reconciler re-drives
// the backlog and it is applied, every grab seated. The control: a backlog of three grabs is
// applied at once, before the other writes end, and the run says so
// instead of counting them. Without holdfast's Redis it does not start.
func TestIsolationTimesOtherKeysBesideTheBacklog(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opt := Options{BaseURL: s.URL, Secret: s.Cfg.JWTSecret, RedisURL: s.Vars["REDIS_URL"], Concurrency: 20, PreferWait: 10 * time.Second,
		Users: 500, Keys: 3, OtherClients: 2, OtherWrites: 5}

	wait := runInBackground(ctx, "isolation", opt)
	// The workers are held back until the whole backlog is in: time enough
	// to take the hot event's lease before any of it is applied.
	var hot int64
	require.Eventually(t, func() bool {
		return s.Pool.QueryRow(ctx, `SELECT id FROM events WHERE name LIKE 'isolation hot %'`).Scan(&hot) == nil
	}, time.Minute, 2*time.Millisecond)
	s.HoldLease(events.EventKey(hot), time.Minute)
	require.Eventually(t, func() bool {
		var applied int
		err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM requests WHERE status = 'succeeded'`).Scan(&applied)
		return err == nil && applied == 10 // the other writes, the hot key's held
	}, time.Minute, 10*time.Millisecond)
	require.NoError(t, s.Redis.Del(ctx, keyed.LeaseKey(events.EventKey(hot))).Err())
	rep, err := wait()
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Violations)
	got := *rep.Isolation
	t.Logf("%s: %s (the run: %.1f s)", got.load(), got.measured(), rep.Seconds)
	require.Equal(t, 10, got.Other.Count, "every other write timed")
	got.Other = Percentiles{}
	require.Equal(t, IsolationReport{Backlog: 500, OtherKeys: 3, OtherClients: 2, OtherWrites: 5, BacklogOpen: 500}, got)
	require.Equal(t, map[string]int{"fcfs succeeded": 510}, rep.Outcomes)

	opt.Users, opt.OtherClients, opt.OtherWrites = 3, 1, 10
	rep, err = Run(ctx, "isolation", opt)
	require.NoError(t, err)
	require.False(t, rep.OK, "control: the backlog drained first")
	require.Equal(t, []string{"the hot key's backlog of 3 had drained before the last of the other writes ended, so they were not " +
		"measured beside it: give it more grabs (-users) or the other clients fewer writes"}, rep.Violations)
	require.Zero(t, rep.Isolation.BacklogOpen)
	require.Equal(t, 10, rep.Isolation.Other.Count)

	opt.RedisURL = ""
	_, err = Run(ctx, "isolation", opt)
	require.EqualError(t, err, "isolation setup: isolation holds the workers back while it submits its backlog: give it holdfast's Redis (-redis)")
}

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
	require.EqualError(t, err, "recovery setup: recovery kills a worker mid-work: give its process id (-kill-pid) and /metrics (-victim-metrics)")

	opt.KillPID = victim.Cmd.Process.Pid
	wait := runInBackground(ctx, "recovery", opt)
	// The survivor comes once the victim is at work, or gone: killed by the
	// run, or dead of its own, which the run's verdict tells.
	require.Eventually(t, func() bool {
		v, err := scrape(ctx, http.DefaultClient, metrics, victimBatches)
		return (err == nil && v[victimBatches] > 0) || victim.Cmd.Process.Signal(syscall.Signal(0)) != nil
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
