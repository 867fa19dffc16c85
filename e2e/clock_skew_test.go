package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
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
