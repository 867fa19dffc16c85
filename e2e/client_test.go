package e2e

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/client"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
)

// TestClientPackage: the Go client users import submits writes, waits for
// their outcomes, decodes typed results, and returns typed errors carrying
// the API's codes, synchronous or from a rejected request.
func TestClientPackage(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	as := func(sub string, role domain.Role) *client.Client {
		return client.NewWithHTTP(s.URL, s.Token(sub, role), s.HTTPClient(t))
	}

	ev, err := as("admin", domain.RoleAdmin).CreateEvent(ctx, client.NewEvent{Name: "client test", SeatCount: 1})
	require.NoError(t, err)
	require.Equal(t, 1, ev.TotalSeats)

	alice := as("alice", domain.RoleUser)
	acc, err := alice.FCFS(ctx, ev.EventID, "+821012345678", client.IdempotencyKey("alice-1"))
	require.NoError(t, err)
	again, err := alice.FCFS(ctx, ev.EventID, "+821012345678", client.IdempotencyKey("alice-1"))
	require.NoError(t, err)
	require.Equal(t, acc.RequestID, again.RequestID, "the same key and body replay the request")
	require.True(t, again.Replayed)
	require.False(t, acc.Replayed)

	out, err := alice.Wait(ctx, acc.RequestID)
	require.NoError(t, err)
	require.True(t, out.Terminal())
	var seat client.FCFSResult
	require.NoError(t, out.Decode(&seat))
	require.Equal(t, "alice", seat.ReservedBy)
	require.Positive(t, seat.SeatID)

	bob := as("bob", domain.RoleUser)
	acc, err = bob.FCFS(ctx, ev.EventID, "")
	require.NoError(t, err)
	out, err = bob.Wait(ctx, acc.RequestID)
	require.NoError(t, err)
	var rejected *client.Error
	require.ErrorAs(t, out.Decode(&seat), &rejected)
	require.Equal(t, "SOLD_OUT", rejected.Code)
	require.Equal(t, http.StatusConflict, rejected.HTTPStatus)
	require.True(t, client.IsCode(out.Err(), "SOLD_OUT"))

	_, err = as("carol", domain.RoleUser).FCFS(ctx, ev.EventID, "not-a-phone")
	var bad *client.Error
	require.True(t, errors.As(err, &bad), "a synchronous refusal is a *client.Error: %v", err)
	require.Equal(t, "INVALID_PHONE", bad.Code)
	require.Equal(t, http.StatusBadRequest, bad.HTTPStatus)
	require.NotEmpty(t, bad.TraceID)

	_, err = client.NewWithHTTP(s.URL, "", s.HTTPClient(t)).FCFS(ctx, ev.EventID, "")
	require.True(t, client.IsCode(err, "UNAUTHENTICATED"), "%v", err)

	st, err := bob.Status(ctx, acc.RequestID)
	require.NoError(t, err)
	require.Equal(t, client.StatusRejected, st.Status)
}
