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
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/probe"
)

// A key whose backlog is over KEY_BACKLOG_CAP gets 429 OVERLOADED with
// Retry-After instead of accepting work it cannot finish; other keys are not
// affected, and once the backlog drains the key is accepted again.
func TestBackpressureOnKeyBacklog(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Overrides: []string{"KEY_BACKLOG_CAP", "5"}})
	c := s.Client("u", domain.RoleUser)
	for range 5 {
		c.Probe(probe.Payload{Keys: []string{"full"}})
	}
	var r systest.Response
	require.Eventually(t, func() bool { // the cap reads a backlog sample at most 1 s old
		r = c.Do("POST", "/api/v1/probe", probe.Payload{Keys: []string{"full"}})
		return r.Status == http.StatusTooManyRequests
	}, 5*time.Second, 50*time.Millisecond)
	require.Equal(t, domain.CodeOverloaded, r.ErrorCode(t))
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	// A two-key write is refused if any of its keys is full.
	r = c.Do("POST", "/api/v1/probe", probe.Payload{Keys: []string{"other", "full"}})
	require.Equal(t, http.StatusTooManyRequests, r.Status)
	c.Probe(probe.Payload{Keys: []string{"other"}})

	s.StartWorker("w")
	s.WaitAllTerminal(30 * time.Second)
	require.Eventually(t, func() bool {
		return c.Do("POST", "/api/v1/probe", probe.Payload{Keys: []string{"full"}}).Status == http.StatusAccepted
	}, 5*time.Second, 100*time.Millisecond)
}

// A queue over QUEUE_CAP refuses writes on every key.
func TestBackpressureOnQueue(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Overrides: []string{"QUEUE_CAP", "10"}})
	c := s.Client("u", domain.RoleUser)
	for i := range 10 {
		c.Probe(probe.Payload{Keys: keyOf(i)})
	}
	var r systest.Response
	require.Eventually(t, func() bool {
		r = c.Do("POST", "/api/v1/probe", probe.Payload{Keys: []string{"fresh-key"}})
		return r.Status == http.StatusTooManyRequests
	}, 5*time.Second, 50*time.Millisecond)
	require.Equal(t, domain.CodeOverloaded, r.ErrorCode(t))
	require.NotEmpty(t, r.Header.Get("Retry-After"))
}

// Tasks deferred into the aggregator's group count against QUEUE_CAP, as
// scheduled ones did: requests that found their key held fill the queue
// too. (Counting only pending tasks, none of these would.)
func TestBackpressureCountsDeferredTasks(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Overrides: []string{"QUEUE_CAP", "10"}})
	ctx := context.Background()
	// A drain holds the key: every request on it is deferred.
	require.NoError(t, s.Redis.Set(ctx, keyed.LeaseKey(probe.SerialKey("held")), 1, time.Minute).Err())
	c := s.Client("u", domain.RoleUser)
	for range 10 {
		c.Probe(probe.Payload{Keys: []string{"held"}})
	}
	insp := asynq.NewInspectorFromRedisClient(s.Redis)
	info, err := insp.GetQueueInfo(probe.Queue)
	require.NoError(t, err)
	require.Equal(t, 10, info.Aggregating, "deferred, waiting to be folded")
	require.Zero(t, info.Pending+info.Scheduled)
	// More requests on the held key until one is refused: each that gets
	// through is deferred too, so none adds a pending task, and a 429 can
	// only count deferred ones. (The API's queue sample is renewed in the
	// background, at most once a second: keyed/admit.go.)
	var r systest.Response
	require.Eventually(t, func() bool {
		r = c.Do("POST", "/api/v1/probe", probe.Payload{Keys: []string{"held"}})
		return r.Status == http.StatusTooManyRequests
	}, 10*time.Second, 100*time.Millisecond)
	require.Contains(t, string(r.Body), "queue "+probe.Queue, "the queue's cap, not the key's")
	info, err = insp.GetQueueInfo(probe.Queue)
	require.NoError(t, err)
	require.Zero(t, info.Pending+info.Scheduled, "nothing but deferred tasks counted")
	require.Equal(t, domain.CodeOverloaded, r.ErrorCode(t))
}
