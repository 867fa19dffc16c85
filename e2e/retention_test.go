package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/probe"
)

// A worker deletes terminal requests once REQUEST_RETENTION has passed (its
// periodic task runs every quarter of it): the outcome answers 404 then, and
// the same Idempotency-Key starts a new request. Until then a replay gets
// the stored request back.
func TestRequestsPastRetentionAreDeleted(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1, Overrides: []string{"REQUEST_RETENTION", "2s"}})
	c := s.Client("u", domain.RoleUser)
	id := c.Probe(probe.Payload{Keys: []string{"kept-a-while"}}, "Idempotency-Key", "retained-once")
	require.Equal(t, domain.StatusSucceeded, c.Wait(id, 30*time.Second).Status)
	require.Equal(t, id, c.Probe(probe.Payload{Keys: []string{"kept-a-while"}}, "Idempotency-Key", "retained-once"),
		"within retention a replay is the same request")

	require.Eventually(t, func() bool {
		return c.Do("GET", "/api/v1/requests/"+id, nil).Status == http.StatusNotFound
	}, 30*time.Second, 200*time.Millisecond)
	again := c.Probe(probe.Payload{Keys: []string{"kept-a-while"}}, "Idempotency-Key", "retained-once")
	require.NotEqual(t, id, again, "after retention a replay is a new request")
}
