package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/internal/systest"
)

// sealFixture is a system whose pre-queue of n entrants (maxConcurrent 1)
// is due to be sealed and is not: salesStartAt and the seal's second of
// grace have passed by Postgres' clock, which decides the seal, and no one
// has sealed it yet, since nothing but a status read tries (no entry comes
// after the start, and the worker's periodic events task runs hourly). It
// returns the entrants in entry order.
func sealFixture(t *testing.T, n int) (*systest.System, int64, []*systest.Client) {
	s := systest.Start(t, systest.Options{Workers: 1, Overrides: []string{"EVENTS_RECONCILE_INTERVAL", "1h"}})
	admin := s.Client("admin", domain.RoleAdmin)
	e := newEvent(t, s, map[string]any{"name": "Drop", "seatCount": 10, "maxConcurrent": 1,
		"presenceTimeoutSeconds": 3600, "claimWindowSeconds": 3600,
		"queueOpensAt": time.Now().Add(-time.Minute).Format(time.RFC3339), "salesStartAt": time.Now().Add(time.Hour).Format(time.RFC3339)})
	pre := queueUsersNamed(t, s, e.EventID, "early", n)
	for _, u := range pre {
		st := queueStatus(t, u, e.EventID)
		require.Equal(t, "prequeue", st.Status)
		require.Nil(t, st.Rank, "before the start no place is known")
	}
	start := time.Now().Add(time.Second).Truncate(time.Second).Add(time.Second)
	r := admin.Do("PATCH", fmt.Sprintf("/api/v1/events/%d", e.EventID), map[string]any{"salesStartAt": start.Format(time.RFC3339)})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	// The seal waits a second past the start by Postgres' clock (seal.go's
	// sealGrace): wait for that clock to get there.
	require.Eventually(t, func() bool {
		var due bool
		err := s.Pool.QueryRow(context.Background(), `SELECT now() >= sales_start_at + interval '1 second' FROM events WHERE id = $1`, e.EventID).Scan(&due)
		return err == nil && due
	}, 15*time.Second, 20*time.Millisecond)
	require.False(t, sealed(t, s, e.EventID), "nothing sealed the pre-queue before the reads")
	return s, e.EventID, pre
}

func sealed(t *testing.T, s *systest.System, ev int64) bool {
	t.Helper()
	var done bool
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT prequeue_sealed_at IS NOT NULL FROM events WHERE id = $1`, ev).Scan(&done))
	return done
}

// requirePlaces checks that every status carries a place and that the
// places are 0 … n−1: the whole pre-queue in its drawn order.
func requirePlaces(t *testing.T, sts []events.Status) {
	t.Helper()
	places := make([]int, 0, len(sts))
	var placeless []string
	for i, st := range sts {
		if st.Status == "prequeue" || st.Rank == nil {
			placeless = append(placeless, fmt.Sprintf("entrant %d (entry order): status %s, rank null", i, st.Status))
			continue
		}
		places = append(places, int(*st.Rank))
	}
	require.Empty(t, placeless, "%d of %d first reads after the start carry no place", len(placeless), len(sts))
	sort.Ints(places)
	for i, p := range places {
		require.Equal(t, i, p, "the places are the pre-queue's, each once")
	}
}

// Found from outside: at salesStartAt + 2 s the first status read of the
// first pre-queue entrant answered {"status":"prequeue","rank":null} while
// the 29 others had ranks. That read was the one that sealed the pre-queue,
// and it answered what it had read before sealing. Here the reads come one
// at a time, the first entrant's first, so the first read is certainly the
// one that finds the seal due and not done: every first read after the
// start, that one included, carries the user's place.
func TestPrequeueFirstReadAfterStartHasPlace(t *testing.T) {
	t.Parallel()
	const n = 30
	s, ev, pre := sealFixture(t, n)
	sts := make([]events.Status, n)
	for i, u := range pre {
		sts[i] = queueStatus(t, u, ev)
		if i == 0 {
			require.True(t, sealed(t, s, ev), "the first read after the start sealed the pre-queue")
		}
	}
	requirePlaces(t, sts)
}

// The same first reads all at once, while the seal is under way: a barrier
// (a lock on the events table, which the seal's UPDATE waits for and
// status reads do not) holds the first read's seal, and only then do the
// other 29 read. Each must wait for that seal, or seal itself, rather than
// answer from before it: the barrier is released once a second read waits
// on it too. Were they answered at once instead, they would all be
// answered while the barrier still stands, from before the seal, and the
// test sees that first.
func TestPrequeueReadsDuringTheSealHavePlaces(t *testing.T) {
	t.Parallel()
	const n = 30
	s, ev, pre := sealFixture(t, n)
	ctx := context.Background()
	tx, err := s.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, `LOCK TABLE events IN SHARE MODE`) // reads pass, the seal's UPDATE waits
	require.NoError(t, err)
	var pid int
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	blocked := func() int {
		var k int
		require.NoError(t, s.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&k))
		return k
	}

	type answer struct {
		i   int
		st  events.Status
		err error
	}
	answers := make(chan answer, n)
	read := func(i int) {
		r, err := pre[i].TryDo("GET", fmt.Sprintf("/api/v1/events/%d/queue/status", ev), nil)
		var st events.Status
		if err == nil && r.Status != http.StatusOK {
			err = fmt.Errorf("status %d: %s", r.Status, r.Body)
		}
		if err == nil {
			err = json.Unmarshal(r.Body, &st)
		}
		answers <- answer{i, st, err}
	}
	go read(0)
	require.Eventually(t, func() bool { return blocked() >= 1 }, 15*time.Second, 5*time.Millisecond,
		"the first read's seal waits at the barrier")
	for i := 1; i < n; i++ {
		go read(i)
	}
	sts := make([]events.Status, n)
	got := 0
	for got < n-1 && blocked() < 2 {
		select {
		case a := <-answers:
			require.NoError(t, a.err)
			sts[a.i] = a.st
			got++
		case <-time.After(5 * time.Millisecond): // look at the barrier again
		}
	}
	t.Logf("before the barrier was released: %d of %d reads answered, %d sessions waited at it", got, n, blocked())
	require.NoError(t, tx.Rollback(ctx))
	for ; got < n; got++ {
		a := <-answers
		require.NoError(t, a.err)
		sts[a.i] = a.st
	}
	require.True(t, sealed(t, s, ev))
	requirePlaces(t, sts)
}
