package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
// marked undispatched) and a poll still answered, within a second or so and
// never with a 5xx but 503: intake does not read Redis before it stores a
// request, the rate limiter fails open, and each Redis command fails after
// one dial (five dial tries made a write take 8–11 s). Once Redis is back,
// empty, the reconciler re-drives every one of them and they are applied.
func TestRedisDownWritesAreAcceptedDurably(t *testing.T) {
	t.Parallel()
	port := testenv.FreePort(t)
	stopRedis := redisAt(t, port)
	s := systest.Start(t, systest.Options{Workers: 1, RedisURL: fmt.Sprintf("redis://127.0.0.1:%d/0", port)})
	c := s.Client("u", domain.RoleUser)
	require.Equal(t, domain.StatusSucceeded, c.Wait(c.Probe(probe.Payload{Keys: []string{"before"}}), 30*time.Second).Status)

	var o outageLoad
	stop := make(chan struct{})
	wait := o.drive(t, c, 4, stop)
	time.Sleep(time.Second)
	stopRedis()
	time.Sleep(5 * time.Second)
	redisAt(t, port)
	time.Sleep(2 * time.Second)
	close(stop)
	wait()
	o.check(t, c, 5*time.Second)
}

// outageLoad is what clients saw while a dependency was out: every answer's
// status, Retry-After and time, and the requests accepted with 202.
type outageLoad struct {
	mu       sync.Mutex
	statuses map[int]int
	slowest  time.Duration
	bad      []string // 5xx other than 503, and 503s without Retry-After
	accepted []string
}

func (o *outageLoad) record(what string, r systest.Response, took time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.statuses == nil {
		o.statuses = map[int]int{}
	}
	o.statuses[r.Status]++
	o.slowest = max(o.slowest, took)
	switch {
	case r.Status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") == "":
		o.bad = append(o.bad, fmt.Sprintf("%s: 503 without Retry-After: %s", what, r.Body))
	case r.Status >= 500 && r.Status != http.StatusServiceUnavailable:
		o.bad = append(o.bad, fmt.Sprintf("%s: %d: %s", what, r.Status, r.Body))
	}
}

// drive runs clients that submit probe writes and poll the requests they
// got back (plain and long polls) until stop is closed.
func (o *outageLoad) drive(t *testing.T, c *systest.Client, clients int, stop <-chan struct{}) (wait func()) {
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []string
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				r, err := c.TryDo("POST", "/api/v1/probe", probe.Payload{Keys: []string{fmt.Sprintf("k%d", n%3)}})
				if err != nil {
					o.fail(fmt.Sprintf("write: %v", err))
					continue
				}
				o.record("write", r, time.Since(start))
				if r.Status == http.StatusAccepted {
					var a systest.Accepted
					r.JSON(t, &a)
					mine = append(mine, a.RequestID)
					o.mu.Lock()
					o.accepted = append(o.accepted, a.RequestID)
					o.mu.Unlock()
				}
				if len(mine) > 0 {
					path := "/api/v1/requests/" + mine[n%len(mine)]
					if i%2 == 1 {
						path += "?wait=1s"
					}
					start = time.Now()
					if r, err = c.TryDo("GET", path, nil); err != nil {
						o.fail(fmt.Sprintf("poll: %v", err))
						continue
					}
					o.record("poll", r, time.Since(start))
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	return wg.Wait
}

func (o *outageLoad) fail(msg string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.bad = append(o.bad, msg)
}

// check asserts what every fault test promises: no 5xx but 503, every 503
// with Retry-After, each answer within bound, and every accepted request
// terminal once the dependency is back.
func (o *outageLoad) check(t *testing.T, c *systest.Client, bound time.Duration) {
	t.Helper()
	t.Logf("answers: %v; slowest %v; %d accepted", o.statuses, o.slowest.Round(time.Millisecond), len(o.accepted))
	require.Empty(t, o.bad)
	require.Positive(t, o.statuses[http.StatusAccepted], "nothing was accepted")
	require.Less(t, o.slowest, bound, "an answer waited on the dependency")
	for _, id := range o.accepted {
		require.True(t, c.Wait(id, 60*time.Second).Status.Terminal())
	}
}

// With Postgres stopped for 10 s and started again, writes and polls get
// 503 UNAVAILABLE with Retry-After within the dependency timeout (2 s),
// never a 500 and never a hang; everything accepted before, during or after
// ends terminal.
func TestPostgresRestartAnswers503(t *testing.T) {
	t.Parallel()
	pg := testenv.PostgresServer(t)
	s := systest.Start(t, systest.Options{Workers: 1, Postgres: pg.URL})
	c := s.Client("u", domain.RoleUser)
	var o outageLoad
	stop := make(chan struct{})
	wait := o.drive(t, c, 4, stop)
	time.Sleep(time.Second)
	pg.Stop()
	time.Sleep(10 * time.Second)
	pg.Start()
	time.Sleep(3 * time.Second)
	close(stop)
	wait()
	o.check(t, c, 4*time.Second)
	require.Positive(t, o.statuses[http.StatusServiceUnavailable], "the outage was not seen")
}

// fillPostgres opens connections to server until it refuses more ("too
// many clients") and returns a function that closes them.
func fillPostgres(t *testing.T, server string) (release func()) {
	t.Helper()
	ctx := context.Background()
	var conns []*pgx.Conn
	release = func() {
		for _, c := range conns {
			_ = c.Close(ctx)
		}
		conns = nil
	}
	t.Cleanup(release)
	for {
		c, err := pgx.Connect(ctx, server+"/postgres?sslmode=disable")
		if err != nil {
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, "53300", pgErr.Code, "too many clients")
			return release
		}
		conns = append(conns, c)
	}
}

// With Postgres at max_connections, an API that needs one more connection
// answers 503 UNAVAILABLE with Retry-After at once (it was 500), and what
// it accepted is applied once connections are free again.
func TestPostgresFullAnswers503(t *testing.T) {
	t.Parallel()
	pg := testenv.PostgresServer(t, "max_connections=30")
	s := systest.Start(t, systest.Options{Workers: 1, Postgres: pg.URL})
	c := s.Client("u", domain.RoleUser)
	require.Equal(t, domain.StatusSucceeded, c.Wait(c.Probe(probe.Payload{Keys: []string{"before"}}), 30*time.Second).Status)
	release := fillPostgres(t, pg.URL)
	var o outageLoad
	stop := make(chan struct{})
	wait := o.drive(t, c, 12, stop)
	time.Sleep(3 * time.Second)
	release()
	time.Sleep(2 * time.Second)
	close(stop)
	wait()
	o.check(t, c, 4*time.Second)
	require.Positive(t, o.statuses[http.StatusServiceUnavailable], "Postgres being full was not felt")
}
