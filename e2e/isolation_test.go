package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/probe"
)

// K4: with a backlog queued on one key, requests on other keys of the same
// queue, sent once the hot key is being drained, are applied while it
// drains: when the last of them is terminal, the hot key still has
// requests open, read at that moment. Shown by order,
// not by a latency: how long the other keys' requests take beside a hot
// key is measured by make bench (docs/benchmarks.md), on a quiet machine.
func TestK4HotKeyDoesNotHoldUpOthers(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{})
	const backlog = 2_000
	// Every hot request sleeps 5 ms inside its transaction, so the key needs
	// over 10 s to drain however fast the machine: the others are applied
	// while it does, or the property does not hold.
	submitMany(t, s, 8, backlog, func(int) probe.Payload { return probe.Payload{Keys: []string{"hot"}, SleepMs: 5} })
	s.StartWorker("w")
	hot := func(status string) (n int) {
		require.NoError(t, s.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM requests WHERE status = ANY(string_to_array($1, ',')) AND keys = ARRAY['probe:hot']`, status).Scan(&n))
		return n
	}
	// The other keys' requests are sent once the hot key is being drained.
	require.Eventually(t, func() bool { return hot("succeeded") > 0 }, time.Minute, 10*time.Millisecond)

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
			}
		}()
	}
	wg.Wait()
	c := s.Client("staff", domain.RoleStaff)
	for _, id := range ids {
		require.Equal(t, domain.StatusSucceeded, c.Wait(id, time.Minute).Status)
	}
	hotOpen := hot("queued,processing")
	t.Logf("the hot key still had %d of %d requests open when the last of %d other-key requests was terminal", hotOpen, backlog, len(ids))
	require.Positive(t, hotOpen, "the other keys' requests were applied while the hot key's backlog drained")

	s.WaitAllTerminal(3 * time.Minute)
	require.Empty(t, s.Probe("hot").Violations())
}
