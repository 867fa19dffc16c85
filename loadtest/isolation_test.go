package loadtest

import (
	"context"
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
