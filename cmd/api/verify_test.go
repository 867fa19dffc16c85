package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/events/draw"
	"github.com/holdfast/holdfast/internal/systest"
)

// `api verify-prequeue` recomputes the order from the API's public data
// alone and prints each user the place the waiting room gives it.
func TestVerifyPrequeueCommand(t *testing.T) {
	s := systest.Start(t, systest.Options{Workers: 1})
	admin := s.Client("admin", domain.RoleAdmin)
	// Time for the 20 entries to be applied before the start on a busy
	// machine: one applied after it joins the line, not the pre-queue.
	start := time.Now().Add(10 * time.Second).Truncate(time.Second).Add(time.Second)
	r := admin.Do("POST", "/api/v1/events", map[string]any{"name": "Verify", "seatCount": 5,
		"salesStartAt": start.Format(time.RFC3339), "presenceTimeoutSeconds": 3600})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var e events.Event
	r.JSON(t, &e)
	base := fmt.Sprintf("/api/v1/events/%d/queue", e.EventID)
	users := make([]*systest.Client, 20)
	for i := range users {
		users[i] = s.Client(fmt.Sprintf("fan-%d", i), domain.RoleUser)
		require.Equal(t, http.StatusAccepted, users[i].Do("POST", base, nil).Status)
	}
	s.WaitAllTerminal(30 * time.Second)
	require.True(t, time.Now().Before(start), "the 20 entries were applied before the start")

	var out bytes.Buffer
	err := verifyPrequeue(context.Background(), []string{"-url", s.URL, "-event", fmt.Sprint(e.EventID)}, &out)
	require.ErrorIs(t, err, draw.ErrSeedNotRevealed, "before the start")

	// The seed is revealed at salesStartAt by the server's clock; the event
	// starts on a whole second, as RFC 3339 carries it here.
	time.Sleep(time.Until(start))
	for _, u := range users {
		var st events.Status
		require.Eventually(t, func() bool {
			u.Do("GET", base+"/status", nil).JSON(t, &st)
			return st.Status == "ready" || st.Status == "waiting"
		}, 10*time.Second, 50*time.Millisecond)
		// A status read during the seal has its place already; the seed is
		// published once the seal commits.
		require.Eventually(t, func() bool {
			out.Reset()
			err := verifyPrequeue(context.Background(),
				[]string{"-url", s.URL, "-event", fmt.Sprint(e.EventID), "-user", u.User}, &out)
			if errors.Is(err, draw.ErrSeedNotRevealed) {
				return false
			}
			require.NoError(t, err)
			return true
		}, 10*time.Second, 20*time.Millisecond)
		require.Contains(t, out.String(), "matches the commitment")
		require.Contains(t, out.String(), fmt.Sprintf("place %d of 20", *st.Rank), out.String())
	}
}
