package e2e

import (
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/probe"
)

// redisAt runs an empty redis-server on port until the returned stop is
// called (or the test ends).
func redisAt(t *testing.T, port int) (stop func()) {
	t.Helper()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	require.NoError(t, cmd.Start())
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
	t.Cleanup(stop)
	require.Eventually(t, func() bool {
		return exec.Command("redis-cli", "-p", strconv.Itoa(port), "ping").Run() == nil
	}, 10*time.Second, 20*time.Millisecond)
	return stop
}

// With Redis down, a write is still stored and answered 202 (its request
// marked undispatched), within a second or so and never with a 5xx: intake
// no longer reads Redis before it stores a request, the rate limiter fails
// open, and each Redis command fails after one dial. Once Redis is back,
// empty, the reconciler re-drives every one of them and they are applied.
func TestRedisDownWritesAreAcceptedDurably(t *testing.T) {
	t.Parallel()
	port := testenv.FreePort(t)
	stopRedis := redisAt(t, port)
	s := systest.Start(t, systest.Options{Workers: 1, RedisURL: fmt.Sprintf("redis://127.0.0.1:%d/0", port)})
	c := s.Client("u", domain.RoleUser)
	require.Equal(t, domain.StatusSucceeded, c.Wait(c.Probe(probe.Payload{Keys: []string{"before"}}), 30*time.Second).Status)

	stopRedis()
	var accepted []string
	for i := range 5 {
		start := time.Now()
		r, err := c.TryDo("POST", "/api/v1/probe", probe.Payload{Keys: []string{"down"}})
		took := time.Since(start)
		require.NoError(t, err)
		t.Logf("write %d with Redis down: %d in %v", i, r.Status, took.Round(time.Millisecond))
		require.Less(t, r.Status, 500, "write %d: %s", i, r.Body)
		// Not a speed target: a bound on waiting for a Redis that is not
		// there (five dial tries per command made it 8–11 s).
		require.Less(t, took, 5*time.Second, "write %d waited on Redis", i)
		if r.Status == http.StatusAccepted {
			var a systest.Accepted
			r.JSON(t, &a)
			accepted = append(accepted, a.RequestID)
		}
	}
	redisAt(t, port)
	for _, id := range accepted {
		require.Equal(t, domain.StatusSucceeded, c.Wait(id, 60*time.Second).Status)
	}
}
