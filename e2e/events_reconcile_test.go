package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/internal/systest"
)

func publicEvent(t *testing.T, s *systest.System, id int64) events.Public {
	t.Helper()
	anon := s.Client("x", domain.RoleUser)
	anon.Token = ""
	var p events.Public
	r := anon.Do("GET", fmt.Sprintf("/api/v1/public/events/%d", id), nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &p)
	return p
}

// repairFixture is a system whose worker runs the events reconcile every
// interval, with an event of 10 seats of which 3 are taken, and the Redis
// key of its remaining-seat count.
func repairFixture(t *testing.T, interval string) (*systest.System, events.Event, string) {
	s := systest.Start(t, systest.Options{Workers: 1, Overrides: []string{"EVENTS_RECONCILE_INTERVAL", interval}})
	e := newEvent(t, s, map[string]any{"name": "Repair", "seatCount": 10})
	for i := range 3 {
		seatOf(t, fcfs(t, s.Client(fmt.Sprintf("r%d", i), domain.RoleUser), e.EventID, nil))
	}
	require.Equal(t, 7, publicEvent(t, s, e.EventID).RemainingSeats)
	return s, e, fmt.Sprintf("hf:{events:ev:%d}:remaining", e.EventID)
}

// The reconcile task repairs a deliberately corrupted remaining-seat count,
// trims expired entry tokens and exports the gauges; two replicas running it
// at once agree. The worker's own run is an hour off, so the corruption
// stays until they repair it.
func TestEventsReconcileRepairs(t *testing.T) {
	t.Parallel()
	s, e, key := repairFixture(t, "1h")
	ctx := context.Background()
	tokens := fmt.Sprintf("hf:{events:q:%d}:tokens", e.EventID)
	require.NoError(t, s.Redis.Set(ctx, key, 999, 0).Err())
	now := time.Now()
	require.NoError(t, s.Redis.ZAdd(ctx, tokens, redisZ(now.Add(-time.Minute), "gone1"), redisZ(now.Add(-time.Second), "gone2"),
		redisZ(now.Add(time.Minute), "still")).Err())
	require.Equal(t, 999, publicEvent(t, s, e.EventID).RemainingSeats, "corrupted")

	replica := func() *events.Rooms {
		room := events.NewRoom(s.Redis, s.Cfg.JWTSecret)
		return events.NewRooms(s.Pool, room, events.NewSealer(s.Pool, room), events.NewCounts(s.Pool, s.Redis))
	}
	replicas := []*events.Rooms{replica(), replica()}
	var wg sync.WaitGroup
	for _, c := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.NoError(t, c.Reconcile(ctx))
		}()
	}
	wg.Wait()
	require.Equal(t, 7, publicEvent(t, s, e.EventID).RemainingSeats)
	require.Equal(t, int64(1), s.Redis.ZCard(ctx, tokens).Val(), "expired tokens trimmed")
	label := strconv.FormatInt(e.EventID, 10)
	for _, c := range replicas {
		require.Equal(t, 7.0, testutil.ToFloat64(c.Remaining().WithLabelValues(label)))
		require.Equal(t, 1.0, testutil.ToFloat64(c.Active.WithLabelValues(label)))
	}
}

// The worker's own periodic run repairs a corrupted count by itself, and
// until it does a damaged count never shows below zero.
func TestEventsPeriodicReconcileRepairs(t *testing.T) {
	t.Parallel()
	s, e, key := repairFixture(t, "1s")
	require.NoError(t, s.Redis.Set(context.Background(), key, -5, 0).Err())
	require.GreaterOrEqual(t, publicEvent(t, s, e.EventID).RemainingSeats, 0, "a damaged count never shows below zero")
	require.Eventually(t, func() bool { return publicEvent(t, s, e.EventID).RemainingSeats == 7 }, 15*time.Second, 100*time.Millisecond)
}

// Server-Sent Events: the remaining seats now, and again when they change.
func TestEventStream(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1})
	e := newEvent(t, s, map[string]any{"name": "Live", "seatCount": 4})
	resp, err := s.HTTPClient(t).Get(fmt.Sprintf("%s/api/v1/public/events/%d/stream", s.URL, e.EventID))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") {
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
			return ""
		}
	}
	require.Equal(t, fmt.Sprintf(`data: {"eventId":%d,"remainingSeats":4}`, e.EventID), next())
	seatOf(t, fcfs(t, s.Client("sse", domain.RoleUser), e.EventID, nil))
	require.Equal(t, fmt.Sprintf(`data: {"eventId":%d,"remainingSeats":3}`, e.EventID), next())
	require.Equal(t, http.StatusNotFound, s.Client("x", domain.RoleUser).Do("GET", "/api/v1/public/events/999999/stream", nil).Status)
}

// FCFS behind the waiting room when the event asks for it.
func TestFCFSEntryTokenRequired(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1})
	e := newEvent(t, s, map[string]any{"name": "Gated", "seatCount": 2, "fcfsEntryTokenRequired": true})
	u := queueUsers(t, s, e.EventID, 1)[0]
	path := fmt.Sprintf("/api/v1/events/%d/seats/fcfs", e.EventID)
	r := u.Do("POST", path, nil)
	require.Equal(t, http.StatusForbidden, r.Status)
	require.Equal(t, domain.CodeEntryTokenRequired, r.ErrorCode(t))
	var tok struct{ EntryToken string }
	r = u.Do("POST", fmt.Sprintf("/api/v1/events/%d/queue/token", e.EventID), nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &tok)
	r = u.Do("POST", path, nil, events.EntryTokenHeader, tok.EntryToken)
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	var a systest.Accepted
	r.JSON(t, &a)
	seatOf(t, u.Wait(a.RequestID, 20*time.Second))
}
