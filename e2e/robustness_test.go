package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/cmd/wiring"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/metrics"
	"github.com/holdfast/holdfast/probe"
	"github.com/holdfast/holdfast/requests"
)

// A request made durable whose dispatch never reached Redis (the API died
// right after the commit) is found and applied even though its key stays
// busy, its lease held, the whole time.
func TestLostDispatchOnBusyKey(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1})
	c := s.Client("busy", domain.RoleUser)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // keep the key's lease held: a steady stream of slow requests
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				c.Probe(probe.Payload{Keys: []string{"busy"}, SleepMs: 40})
				time.Sleep(20 * time.Millisecond) // the stream's pace, half a request's time
			}
		}
	}()
	require.Eventually(t, func() bool {
		return s.Redis.Exists(context.Background(), keyed.LeaseKey(probe.SerialKey("busy"))).Val() == 1
	}, 20*time.Second, 10*time.Millisecond, "the stream never took the key's lease")

	// Stored as intake stores it, and never dispatched.
	lost := uuid.Must(uuid.NewV7())
	_, err := s.Pool.Exec(context.Background(), `INSERT INTO requests (id, type, queue, user_id, keys, payload, accepted_at)
		VALUES ($1, $2, $3, 'busy', $4, '{"keys":["busy"]}', now())`,
		lost, probe.TypeIncr, probe.Queue, []string{probe.SerialKey("busy")})
	require.NoError(t, err)
	start := time.Now()
	v := c.Wait(lost.String(), 20*time.Second)
	t.Logf("the undispatched request finished %s after its commit", time.Since(start).Round(time.Millisecond))
	require.Equal(t, domain.StatusSucceeded, v.Status)
	close(stop)
	wg.Wait()
	s.WaitAllTerminal(30 * time.Second)
	require.Empty(t, s.Probe("busy").Violations())
}

// A request whose applier always fails, deep inside a batch, is isolated by
// halving the batch: it alone ends failed and everything around it succeeds.
// (How long that takes is logged, not asserted: a latency on a machine
// shared with the rest of the suite.)
func TestPoisonDeepInBatchIsIsolated(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{})
	c := s.Client("p", domain.RoleUser)
	var poison string
	for i := range 300 {
		id := c.Probe(probe.Payload{Keys: []string{"poisoned"}, Poison: i == 200})
		if i == 200 {
			poison = id
		}
	}
	s.StartWorker("w")
	took := s.WaitAllTerminal(2 * time.Minute)
	t.Logf("300 requests with a poisoned one at position 200 done in %s", took.Round(time.Millisecond))
	require.Equal(t, map[domain.Status]int{domain.StatusSucceeded: 299, domain.StatusFailed: 1}, s.Statuses())
	require.Equal(t, domain.StatusFailed, c.Wait(poison, time.Second).Status)
	r := s.Probe("poisoned")
	require.Empty(t, r.Violations())
	require.Equal(t, int64(299), r.Counter)
}

// After Redis loses its token counters, requests with four keys re-issue a
// token per key and go through at once, rather than one key per reconcile.
func TestFourKeysAfterFlushall(t *testing.T) {
	t.Parallel()
	redisURL, rdb := testenv.RedisServer(t)
	s := systest.Start(t, systest.Options{RedisURL: redisURL, Workers: 1})
	c := s.Client("u", domain.RoleUser)
	four := probe.Payload{Keys: []string{"w", "x", "y", "z"}}
	for range 10 {
		c.Probe(four)
	}
	s.WaitAllTerminal(20 * time.Second)
	require.NoError(t, rdb.FlushAll(context.Background()).Err())

	start := time.Now()
	var ids []string
	for range 10 {
		ids = append(ids, c.Probe(four))
	}
	for _, id := range ids {
		require.Equal(t, domain.StatusSucceeded, c.Wait(id, 20*time.Second).Status)
	}
	t.Logf("10 four-key requests after FLUSHALL done in %s", time.Since(start).Round(time.Millisecond))
	require.Less(t, time.Since(start), 5*time.Second)
	for _, k := range four.Keys {
		r := s.Probe(k)
		require.Empty(t, r.Violations())
		require.Equal(t, int64(20), r.Counter)
	}
}

// splitDispatcher admits through one engine and dispatches through another:
// the real code on both sides, with the second one's Redis unreachable, as
// when Redis fails between a request's commit and its dispatch.
type splitDispatcher struct {
	admit, dispatch *keyed.Engine
}

func (d splitDispatcher) Admit(ctx context.Context, queue string, keys []string) error {
	return d.admit.Admit(ctx, queue, keys)
}

func (d splitDispatcher) Post(ctx context.Context, rs []*requests.Request) ([]requests.Posting, error) {
	return d.dispatch.Post(ctx, rs)
}

func (d splitDispatcher) Enqueue(ctx context.Context, r *requests.Request, p requests.Posting) error {
	return d.dispatch.Enqueue(ctx, r, p)
}

// K3 when a dispatch fails: the request is durable and answered 202, so a
// later request on its key must not be applied before it.
func TestUndispatchedRequestIsNotOvertaken(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1})
	dead := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)),
		MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = dead.Close() })
	reg := prometheus.NewRegistry()
	live := keyed.New(s.Pool, s.Redis, nil, s.Log, metrics.NewPipeline(reg), wiring.KeyedOptions(s.Cfg, "live"))
	broken := keyed.New(s.Pool, dead, nil, s.Log, metrics.NewPipeline(prometheus.NewRegistry()), wiring.KeyedOptions(s.Cfg, "broken"))
	t.Cleanup(func() { _ = live.Close(); _ = broken.Close() })
	intake := requests.NewIntake(requests.NewStore(s.Pool), splitDispatcher{live, broken}, s.Log)

	first, _, err := intake.Accept(context.Background(), requests.Submission{Type: probe.TypeIncr, Queue: probe.Queue,
		UserID: "o", Keys: []string{probe.SerialKey("order2")}, Payload: []byte(`{"keys":["order2"]}`)})
	require.NoError(t, err)
	c := s.Client("o", domain.RoleUser)
	second := c.Probe(probe.Payload{Keys: []string{"order2"}})

	require.Equal(t, domain.StatusSucceeded, c.Wait(second, 20*time.Second).Status)
	require.Equal(t, domain.StatusSucceeded, c.Wait(first.ID.String(), 20*time.Second).Status)
	var firstValue, secondValue int64
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT
		(SELECT value FROM probe_log WHERE request_id = $1), (SELECT value FROM probe_log WHERE request_id = $2)`,
		first.ID, second).Scan(&firstValue, &secondValue))
	require.Equal(t, []int64{1, 2}, []int64{firstValue, secondValue}, "the undispatched request was applied first")
	var flagged int
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT count(*) FROM requests WHERE undispatched`).Scan(&flagged))
	require.Zero(t, flagged)
}
