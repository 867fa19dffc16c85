package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/probe"
)

// K4: with 10,000 requests queued on one key, requests on other keys of the
// same queue finish within 1 s (p99) while the backlog drains.
//
// Not parallel: the bar is a latency on two cores, so it is measured while
// holdfast alone uses them, before the parallel wave of other systems starts.
func TestK4HotKeyDoesNotHoldUpOthers(t *testing.T) {
	s := systest.Start(t, systest.Options{})
	const backlog = 10_000
	// Every hot request sleeps 1 ms inside its transaction, so the key needs
	// well over 10 s to drain: the others are measured while it does.
	submitMany(t, s, 16, backlog, func(int) probe.Payload { return probe.Payload{Keys: []string{"hot"}, SleepMs: 1} })
	s.StartWorker("w")

	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := s.Client(fmt.Sprintf("cold%d", c), domain.RoleUser)
			for i := range 50 {
				id := cl.Probe(probe.Payload{Keys: []string{fmt.Sprintf("cold-%d-%d", c, i%10)}})
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	c := s.Client("staff", domain.RoleStaff)
	for _, id := range ids {
		require.Equal(t, domain.StatusSucceeded, c.Wait(id, 30*time.Second).Status)
	}
	var hotOpen int
	require.NoError(t, s.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM requests WHERE status IN ('queued', 'processing') AND keys = ARRAY['probe:hot']`).Scan(&hotOpen))
	t.Logf("hot key still had %d of %d requests queued when the last other-key request finished", hotOpen, backlog)
	require.Greater(t, hotOpen, 1000, "the measurement must happen while the backlog drains")

	rows, err := s.Pool.Query(context.Background(), `SELECT extract(epoch FROM completed_at - accepted_at)
		FROM requests WHERE id = ANY($1::uuid[])`, ids)
	require.NoError(t, err)
	var lat []float64
	for rows.Next() {
		var v float64
		require.NoError(t, rows.Scan(&v))
		lat = append(lat, v)
	}
	require.NoError(t, rows.Err())
	require.Len(t, lat, len(ids))
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("other keys, accept→terminal over %d requests: p50 %.3fs p99 %.3fs max %.3fs", len(lat), p50, p99, lat[len(lat)-1])
	require.Less(t, p99, 1.0)

	s.WaitAllTerminal(3 * time.Minute)
	require.Empty(t, s.Probe("hot").Violations())
}

var _ = systest.Options{}
