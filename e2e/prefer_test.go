package e2e

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/probe"
	"github.com/holdfast/holdfast/requests"
)

// `Prefer: wait=N` (RFC 7240) on a write: the answer is the outcome (200,
// as GET /api/v1/requests/{id} shows it) when the request is terminal within
// N seconds, else the usual 202. A held apply forces the 202 case.
func TestPreferWait(t *testing.T) {
	t.Parallel()
	var hold atomic.Bool
	release := make(chan struct{})
	s := systest.Start(t, systest.Options{Workers: 1, WrapApplier: func(name string, a keyed.Applier) keyed.Applier {
		if name != probe.TypeIncr {
			return a
		}
		return keyed.ApplierFunc(func(ctx context.Context, tx pgx.Tx, b *keyed.Batch) ([]requests.Outcome, error) {
			if hold.Load() {
				<-release
			}
			return a.Apply(ctx, tx, b)
		})
	}})
	c := s.Client("prefers", domain.RoleUser)
	outcome := func(r systest.Response) requests.View {
		t.Helper()
		require.Equal(t, http.StatusOK, r.Status, "body: %s", r.Body)
		var v requests.View
		r.JSON(t, &v)
		require.Equal(t, "/api/v1/requests/"+v.RequestID, r.Header.Get("Location"))
		return v
	}

	// Finished in time: 200 with the outcome, succeeded or rejected alike.
	r := c.Do("POST", "/api/v1/probe", probe.Payload{Keys: []string{"a"}}, "Prefer", "wait=5")
	v := outcome(r)
	require.Equal(t, "wait=5", r.Header.Get("Preference-Applied"))
	require.Equal(t, domain.StatusSucceeded, v.Status)
	require.JSONEq(t, `{"values":{"a":1}}`, string(v.Result))
	r = c.Do("POST", "/api/v1/probe", probe.Payload{Keys: []string{"a"}, Limit: 1}, "Prefer", "respond-async, wait=5")
	v = outcome(r)
	require.Equal(t, domain.StatusRejected, v.Status)
	require.Equal(t, probe.CodeLimitReached, v.Error.Code)

	// More than POLL_MAX_WAIT is applied as POLL_MAX_WAIT.
	r = c.Do("POST", "/api/v1/probe", probe.Payload{Keys: []string{"a"}}, "Prefer", "wait=3600")
	require.Equal(t, "wait="+strconv.Itoa(int(s.Cfg.PollMaxWait/time.Second)), r.Header.Get("Preference-Applied"))
	require.Equal(t, domain.StatusSucceeded, outcome(r).Status)

	// Not finished in time: 202 after the wait.
	hold.Store(true)
	start := time.Now()
	r = c.Do("POST", "/api/v1/probe", probe.Payload{Keys: []string{"b"}}, "Prefer", "wait=1", "Idempotency-Key", "prefer-1")
	require.Equal(t, http.StatusAccepted, r.Status, "body: %s", r.Body)
	took := time.Since(start)
	require.GreaterOrEqual(t, took, time.Second)
	// Never held past N, but for one bounded read of the request at the end.
	require.Less(t, took, time.Second+s.Cfg.DependencyTimeout+time.Second, "the answer was held past its wait")
	require.Equal(t, "wait=1", r.Header.Get("Preference-Applied"))
	var a systest.Accepted
	r.JSON(t, &a)
	require.Contains(t, []string{"queued", "processing"}, a.Status)

	// A held write when its API shuts down: answered 202 at once, not cut
	// off when SHUTDOWN_TIMEOUT runs out (the wait asked for is longer).
	url, stopAPI := s.StartStoppableAPI()
	answered := make(chan systest.Response, 1)
	go func() {
		answered <- c.At(url).Do("POST", "/api/v1/probe", probe.Payload{Keys: []string{"d"}}, "Prefer", "wait=30")
	}()
	require.Eventually(t, func() bool {
		var n int
		return s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM requests WHERE keys @> ARRAY[$1]`, probe.SerialKey("d")).Scan(&n) == nil && n == 1
	}, 10*time.Second, 10*time.Millisecond, "the write is accepted before the API stops")
	start = time.Now()
	stopAPI()
	r = <-answered
	require.Equal(t, http.StatusAccepted, r.Status, "body: %s", r.Body)
	require.Less(t, time.Since(start), s.Cfg.ShutdownTimeout, "answered as the API stopped, not cut off")

	// Released, the replay of the same write waits for the same request.
	hold.Store(false)
	close(release)
	r = c.Do("POST", "/api/v1/probe", probe.Payload{Keys: []string{"b"}}, "Prefer", "wait=10", "Idempotency-Key", "prefer-1")
	v = outcome(r)
	require.Equal(t, a.RequestID, v.RequestID)
	require.Equal(t, domain.StatusSucceeded, v.Status)
	require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))

	// No preference, or one the API does not understand: 202 at once.
	for _, prefer := range []string{"", "wait=soon", "wait=-1", "respond-async"} {
		r = c.Do("POST", "/api/v1/probe", probe.Payload{Keys: []string{"c"}}, "Prefer", prefer)
		require.Equal(t, http.StatusAccepted, r.Status, "Prefer: %q", prefer)
		require.Empty(t, r.Header.Get("Preference-Applied"), "Prefer: %q", prefer)
	}
}
