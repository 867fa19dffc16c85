package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/probe"
	"github.com/holdfast/holdfast/requests"
)

// Postgres' clock is the one clock for every time one holdfast process
// stamps and another compares: a request's acceptance, a batch's time, the
// reconciler's cutoff. Here Postgres runs ten minutes ahead of the API and
// the worker (testenv.SkewedPostgresServer: a Go process's clock cannot be
// moved, Postgres' can, and a skew is a skew whichever side it is on).
//
// An API that died between storing a write and putting it in its mailbox
// leaves a request only the reconciler finds (its mailbox entry and task
// are removed here, as that API never made them). The worker, started
// after, re-drives it within REDRIVE_AFTER and RECONCILE_INTERVAL, not
// after the ten minutes of skew, and applies it; the request reads as
// accepted and completed by Postgres' clock, in that order.
//
// The control is the comparison the reconciler made before: a cutoff from
// the worker's own clock (now − REDRIVE_AFTER) against acceptance times
// another clock stamped. On the same rows, at the same moment, it finds
// nothing: the request would have waited out the skew.
func TestOneClockAcrossSkewedProcesses(t *testing.T) {
	t.Parallel()
	const skew, redriveAfter = 10 * time.Minute, time.Second
	pg := testenv.SkewedPostgresServer(t, skew)
	s := systest.Start(t, systest.Options{Postgres: pg.URL,
		Overrides: []string{"RECONCILE_INTERVAL", "1s", "REDRIVE_AFTER", redriveAfter.String()}})
	ctx := context.Background()
	var pgNow time.Time
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT now()`).Scan(&pgNow))
	require.InDelta(t, skew.Seconds(), time.Until(pgNow).Seconds(), 60, "Postgres' clock runs ahead by the skew")

	c := s.Client("skewed", domain.RoleUser)
	id := c.Probe(probe.Payload{Keys: []string{"skew"}})
	sent := time.Now()
	view := requestView(t, c, id)
	require.InDelta(t, skew.Seconds(), view.AcceptedAt.Sub(sent).Seconds(), 60,
		"accepted_at is Postgres' clock, not the API's")

	// The API that stored it never put it in its mailbox.
	key := probe.SerialKey("skew")
	require.NoError(t, s.Redis.Del(ctx, keyed.KeyTag(key)+":mbox").Err())
	_, err := asynq.NewInspectorFromRedisClient(s.Redis).DeleteAllPendingTasks(probe.Queue)
	require.NoError(t, err)

	// Old enough to re-drive, by Postgres' clock.
	require.Eventually(t, func() bool {
		var old bool
		err := s.Pool.QueryRow(ctx, `SELECT now() - accepted_at > $2::interval FROM requests WHERE id = $1`, id, redriveAfter).Scan(&old)
		return err == nil && old
	}, 15*time.Second, 20*time.Millisecond)
	var oldCutoff int
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT count(*) FROM requests WHERE completed_at IS NULL AND accepted_at < $1`,
		time.Now().Add(-redriveAfter)).Scan(&oldCutoff))
	require.Zero(t, oldCutoff, "control: a worker's clock against another clock's stamps sees nothing to re-drive")
	open, err := requests.NewStore(s.Pool).OpenKeys(ctx, redriveAfter, requests.OpenKey{}, 10)
	require.NoError(t, err)
	require.Len(t, open, 1, "Postgres' clock against its own stamps: the key to re-drive")
	require.Equal(t, key, open[0].Key)

	s.StartWorker("w1")
	done := c.Wait(id, 30*time.Second)
	require.Equal(t, domain.StatusSucceeded, done.Status, "re-driven and applied within seconds, not the skew's ten minutes")
	require.NotNil(t, done.CompletedAt)
	require.False(t, done.CompletedAt.Before(done.AcceptedAt), "completed after it was accepted, by one clock")
	require.InDelta(t, skew.Seconds(), time.Until(*done.CompletedAt).Seconds(), 60, "completed_at is Postgres' clock, not the worker's")
}

// requestView reads a request's status as its client does.
func requestView(t *testing.T, c *systest.Client, id string) requests.View {
	t.Helper()
	r := c.Do("GET", "/api/v1/requests/"+id, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var v requests.View
	r.JSON(t, &v)
	return v
}

// A pre-queue is closed, drawn, sealed and opened by Postgres' clock alone.
// Postgres runs ten minutes ahead of the API, the worker and Redis; the
// event's salesStartAt is a moment ahead by Postgres' clock, ten minutes
// ahead by theirs. Once that moment and the seal's grace have passed (by
// Postgres' clock), each entrant's first status read carries its place,
// the first in line takes its token, and the public event shows the seed.
//
// Controls: by the clocks of the API and Redis the sale has not started,
// which is what the comparisons made before asked: the API tried to seal
// only once its own clock passed salesStartAt, the room opened only once
// Redis's did, and the seed was shown once the API's did. Each would have
// kept the pre-queue shut, and the seed hidden, for the ten minutes.
func TestPrequeueOnPostgresClock(t *testing.T) {
	t.Parallel()
	const skew = 10 * time.Minute
	pg := testenv.SkewedPostgresServer(t, skew)
	s := systest.Start(t, systest.Options{Postgres: pg.URL, Workers: 1, Overrides: []string{"EVENTS_RECONCILE_INTERVAL", "1h"}})
	ctx := context.Background()
	var pgNow time.Time
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT now()`).Scan(&pgNow))
	require.InDelta(t, skew.Seconds(), time.Until(pgNow).Seconds(), 60, "Postgres' clock runs ahead by the skew")
	start := pgNow.Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	e := newEvent(t, s, map[string]any{"name": "Skewed drop", "seatCount": 5, "maxConcurrent": 1,
		"presenceTimeoutSeconds": 3600, "claimWindowSeconds": 3600, "salesStartAt": start.Format(time.RFC3339)})
	const n = 5
	pre := queueUsersNamed(t, s, e.EventID, "early", n)
	for _, u := range pre {
		require.Equal(t, "prequeue", queueStatus(t, u, e.EventID).Status, "accepted before the start by Postgres' clock")
	}
	require.Nil(t, publicEvent(t, s, e.EventID).ShuffleSeed)

	require.Eventually(t, func() bool {
		var due bool
		err := s.Pool.QueryRow(ctx, `SELECT now() >= sales_start_at + interval '1 second' FROM events WHERE id = $1`, e.EventID).Scan(&due)
		return err == nil && due
	}, 15*time.Second, 20*time.Millisecond, "the seal is due by Postgres' clock")
	redisNow, err := s.Redis.Time(ctx).Result()
	require.NoError(t, err)
	require.True(t, time.Now().Before(start), "control: by the API's clock the sale has not started")
	require.True(t, redisNow.Before(start), "control: nor by Redis's")

	sts := make([]events.Status, n)
	for i, u := range pre {
		sts[i] = queueStatus(t, u, e.EventID)
	}
	requirePlaces(t, sts)
	first := 0
	for i, st := range sts {
		if *st.Rank == 0 {
			first = i
		}
	}
	base := fmt.Sprintf("/api/v1/events/%d/queue", e.EventID)
	r := pre[first].Do("POST", base+"/token", nil)
	require.Equal(t, http.StatusOK, r.Status, "the first in line is admitted: %s", r.Body)
	require.NotNil(t, publicEvent(t, s, e.EventID).ShuffleSeed, "sealed: the seed is shown")
}

// The holds of a night are counted in a sorted set in Redis whose scores
// are the holds' expiries by the batch's clock (Postgres'). Here Postgres
// runs an hour behind Redis (and the API and the worker): the set must
// outlive its last hold whatever Redis's clock says. 40 users race for the
// last 3 rooms: exactly 3 holds, 3 reservations.
//
// Control: the set's expiry used to be set as a time on Redis's clock
// (PEXPIREAT at the last hold's expiry). By Redis's clock every hold
// granted here expired long ago, so that set would have gone at once, the
// night would have counted no hold, and every racer would have got one.
func TestHoldsCountedOnOneClockWithPostgresBehind(t *testing.T) {
	t.Parallel()
	const skew = -time.Hour
	pg := testenv.SkewedPostgresServer(t, skew)
	s := systest.Start(t, systest.Options{Postgres: pg.URL, Overrides: raceOverrides})
	ctx := context.Background()
	var pgNow time.Time
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT now()`).Scan(&pgNow))
	require.InDelta(t, skew.Seconds(), time.Until(pgNow).Seconds(), 60, "Postgres' clock runs behind by the skew")
	rt := holdFixture(t, s, 3)
	holds, reservations := holdRace(t, s, rt, 40, 1, 1)
	require.Equal(t, 3, holds)
	require.Equal(t, 3, reservations)

	// The race's holds are confirmed and gone: one more, on later nights,
	// to look at the counts it leaves.
	in := time.Now().UTC().AddDate(0, 0, 30)
	late := holdClient{s.Client("late", domain.RoleUser), t}
	held := hold(t, late.create(rt, in.Format(domain.DateLayout), in.AddDate(0, 0, 2).Format(domain.DateLayout), uuid.NewString()))
	require.WithinDuration(t, pgNow, held.CreatedAt, time.Minute, "the hold is stamped with Postgres' clock")
	var nights []string
	for d := range 2 {
		k, err := s.Redis.Keys(ctx, "*:held:"+in.AddDate(0, 0, d).Format(domain.DateLayout)).Result()
		require.NoError(t, err)
		require.Len(t, k, 1)
		nights = append(nights, k...)
	}
	redisNow, err := s.Redis.Time(ctx).Result()
	require.NoError(t, err)
	for _, k := range nights {
		last, err := s.Redis.ZRangeWithScores(ctx, k, -1, -1).Result()
		require.NoError(t, err)
		require.Len(t, last, 1)
		require.Less(t, int64(last[0].Score), redisNow.UnixMilli(), "control: by Redis's clock the last hold of %s has expired", k)
		require.Positive(t, s.Redis.PTTL(ctx, k).Val(), "%s outlives its last hold", k)
	}
}
