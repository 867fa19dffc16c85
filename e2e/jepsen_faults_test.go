package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/apispec"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/internal/testenv"
)

// The fault faultHistories' deployments and the faults injected into them. A
// rig is holdfast as it is deployed: API and worker processes (the test
// binary re-executed), several APIs behind a balancer, on a Postgres
// server and a Redis server of the history's own, so that either can be
// stopped, frozen or emptied without touching any other test.

// rigStep bounds each step of building or repairing a rig: a process
// ready, a balancer routing to it.
const rigStep = 60 * time.Second

// rig is one history's deployment.
type rig struct {
	t         *testing.T
	s         *systest.System
	pg        *testenv.PGServer
	redisPort int
	stopRedis func()
	lb        *systest.Balancer // in front of the APIs when there are several
	apis      []*systest.Serving
	workers   []*systest.Serving
	started   int // processes started, for their names
}

// rigSpec is a deployment's shape.
type rigSpec struct {
	apis, workers int
	// unguarded runs one in-process worker of the handler-only design
	// (systest.Options.Unguarded) instead of worker processes: the control.
	unguarded bool
	overrides []string // config name, value pairs for every process
}

// newRig starts a private Postgres and Redis, then spec's APIs (behind a
// balancer when there are several) and workers, each ready.
func newRig(t *testing.T, spec rigSpec) *rig {
	t.Helper()
	pg := testenv.PostgresServer(t)
	port := testenv.FreePort(t)
	stopRedis := redisAt(t, port)
	opts := systest.Options{NoAPI: true, Postgres: pg.URL, RedisURL: fmt.Sprintf("redis://127.0.0.1:%d/0", port),
		Unguarded: spec.unguarded, Overrides: spec.overrides}
	if spec.unguarded {
		opts.Workers = 1
	}
	r := &rig{t: t, pg: pg, redisPort: port, stopRedis: stopRedis, s: systest.Start(t, opts)}
	if spec.apis > 1 {
		r.lb = systest.NewBalancer(t)
	}
	for range spec.apis {
		r.apis = append(r.apis, r.startAPI())
	}
	if !spec.unguarded {
		for range spec.workers {
			r.workers = append(r.workers, r.startWorker())
		}
	}
	return r
}

// URL is where clients send their requests: the balancer, or the one API.
func (r *rig) URL() string {
	if r.lb != nil {
		return r.lb.URL
	}
	return r.apis[0].URL
}

func (r *rig) name(binary string) string {
	r.started++
	return fmt.Sprintf("%s-%d", binary, r.started)
}

// startAPI starts an API process and waits until it serves (and, behind
// the balancer, until the balancer routes to it).
func (r *rig) startAPI() *systest.Serving {
	p := r.s.StartProcess("api", r.name("api"))
	if r.lb == nil {
		waitReady(r.t, p)
		return p
	}
	r.lb.Add(p.URL)
	r.lb.WaitRouted(p.URL, true, rigStep)
	return p
}

// startWorker starts a worker process and waits until it applies writes
// (its /readyz answers 200).
func (r *rig) startWorker() *systest.Serving {
	p := r.s.StartProcess("worker", r.name("worker"))
	waitReady(r.t, p)
	return p
}

// waitReady waits until p's /readyz answers 200.
func waitReady(t *testing.T, p *systest.Serving) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := http.Get(p.URL + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, rigStep, 20*time.Millisecond, "%s ready", p.Name)
}

// requireRunning fails the test if a process of the rig that no fault
// killed has ended: a data race ends a process (GORACE halt_on_error), as
// would a crash.
func (r *rig) requireRunning() {
	for _, p := range append(slices.Clone(r.apis), r.workers...) {
		err := p.Exited(100 * time.Millisecond)
		require.Error(r.t, err, "%s ended by itself", p.Name)
		var exit *exec.ExitError
		require.False(r.t, errors.As(err, &exit), "%s ended by itself: %v", p.Name, err)
	}
}

// killWorker kills worker i with SIGKILL and waits for it to be gone.
func (r *rig) killWorker(i int) string {
	return kill9(r.t, r.workers[i])
}

// open is how many requests are accepted and not yet terminal.
func (r *rig) open() int {
	var n int
	require.NoError(r.t, r.s.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM requests WHERE status IN ('queued', 'processing')`).Scan(&n))
	return n
}

func kill9(t *testing.T, p *systest.Serving) string {
	t.Helper()
	require.NoError(t, p.Kill())
	require.Error(t, p.Exited(rigStep), "%s was killed", p.Name)
	return p.Name
}

// killAPI kills API i with SIGKILL under load, waits until the balancer
// has taken it out of the rotation, and starts its replacement.
func (r *rig) killAPI(i int) (killed, started string) {
	old := r.apis[i]
	killed = kill9(r.t, old)
	r.lb.WaitRouted(old.URL, false, rigStep)
	r.lb.Remove(old.URL)
	r.apis[i] = r.startAPI()
	return killed, r.apis[i].Name
}

// leaseTTL is the LEASE_TTL of every rig (testenv's test configuration).
func (r *rig) leaseTTL() time.Duration { return r.s.Cfg.LeaseTTL }

// restartRedis kills Redis and starts an empty one on the same port after
// down.
func (r *rig) restartRedis(down time.Duration) {
	outage(down, r.stopRedis, func() { r.stopRedis = redisAt(r.t, r.redisPort) })
}

// outage strikes, lets the fault last d, then heals: how long a store or a
// process is away is the scenario, the one wait of a fault that is not for
// an event.
func outage(d time.Duration, strike, heal func()) {
	strike()
	time.Sleep(d)
	heal()
}

// flushRedis empties Redis: every mailbox, lease, task and queue is lost.
func (r *rig) flushRedis() {
	require.NoError(r.t, r.s.Redis.FlushAll(context.Background()).Err())
}

// restartPostgres stops Postgres (fast shutdown: sessions cut, open
// transactions rolled back) and starts it again after down.
func (r *rig) restartPostgres(down time.Duration) {
	outage(down, r.pg.Stop, r.pg.Start)
}

// freezePostgres stops the private server's postmaster and every process
// it forked (backends, checkpointer, WAL writer…) with SIGSTOP, as a VM
// paused by its host or a stalled disk freezes a database: connections stay
// open and nothing answers. It thaws them with SIGCONT after d, and returns
// how many processes it froze.
func (r *rig) freezePostgres(d time.Duration) int {
	var f *testenv.Frozen
	outage(d, func() { f = r.pg.Freeze() }, func() { f.Thaw() })
	return len(f.Pids)
}

// freezeRedis stops the private Redis with SIGSTOP, as a paused VM or a
// partition that drops packets freezes it: connections stay open and
// nothing answers. It thaws it with SIGCONT after d.
func (r *rig) freezeRedis(d time.Duration) {
	var f *testenv.Frozen
	outage(d, func() { f = testenv.FreezeRedis(r.t, r.s.Redis) }, func() { f.Thaw() })
}

// pauseWorker stops worker i with SIGSTOP for d (past its leases), then
// lets it go on with SIGCONT, and returns how many lease losses it
// counted once resumed (holdfast_keyed_lease_lost_total): a holder that
// finds on waking that its lease lapsed or was fenced.
func (r *rig) pauseWorker(i int, d time.Duration) (lost float64) {
	t, p := r.t, r.workers[i]
	before := leaseLosses(t, p)
	var f *testenv.Frozen // for d, past the lease's TTL
	outage(d, func() { f = testenv.FreezeTree(t, p.Cmd.Process.Pid) }, func() { f.Thaw() })
	// The resumed holder learns its lease is gone at its next extend or
	// commit, at the latest a lease's TTL after it wakes; a worker that held
	// no lease when it was paused counts nothing.
	deadline := time.Now().Add(2*r.leaseTTL() + 5*time.Second)
	for {
		lost = leaseLosses(t, p) - before
		if lost > 0 || time.Now().After(deadline) {
			return lost
		}
		// A scrape's pace: the process tells no one when it counts.
		time.Sleep(100 * time.Millisecond)
	}
}

// leaseLosses is p's holdfast_keyed_lease_lost_total, every queue summed.
func leaseLosses(t *testing.T, p *systest.Serving) float64 {
	t.Helper()
	resp, err := http.Get(p.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "holdfast_keyed_lease_lost_total") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		require.NoError(t, err, "%s", line)
		sum += v
	}
	require.NoError(t, sc.Err())
	return sum
}

// viaBalancer is the transport of clients behind the balancer: the
// balancer's own 502, sent when the API it chose failed mid-exchange (a
// killed API), reaches the client as what it is, a connection that ended
// without an answer: a transport error, whose write's outcome the client
// does not know. Every answer an API gave is checked against the OpenAPI
// document, as systest's clients do.
type viaBalancer struct {
	t    testing.TB
	base http.RoundTripper
}

// errNoAnswer is a request the balancer could not get an API to answer.
var errNoAnswer = errors.New("no API answered: the balancer's 502")

func (v viaBalancer) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := v.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusBadGateway {
		return nil, errNoAnswer
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	doc, err := apispec.Load()
	if err == nil {
		err = doc.Check(req.Method, req.URL.RequestURI(), resp.StatusCode, resp.Header, body)
	}
	if err != nil {
		v.t.Errorf("openapi: %v\nresponse body: %.2000s", err, body)
	}
	return resp, nil
}

// balancedHTTP is the HTTP client of clients behind the balancer.
func balancedHTTP(t testing.TB) *http.Client {
	return &http.Client{Transport: viaBalancer{t: t, base: &http.Transport{MaxIdleConnsPerHost: 64}}, Timeout: 60 * time.Second}
}
