package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/probe"
	"github.com/holdfast/holdfast/requests"
)

// A rolling deploy loses nothing. Two APIs and two workers, each its own
// OS process, serve a rush of FCFS seat grabs and probe increments (a
// counter with a limit: a SKU's stock) through a balancer that routes as a
// Kubernetes Service does (systest.Balancer: round robin over the backends
// whose readiness checks pass). Every process is replaced one at a time,
// as a Deployment rollout with maxSurge 1 and maxUnavailable 0 does — a
// new one started and ready, then the old one sent SIGTERM and waited for
// — and the whole fleet is rolled twice. An API told to stop is kept in
// the rotation until the balancer has sent it a few requests after its
// readiness failed (the time endpoints take to leave every node's rules,
// made certain here), so the drain (SHUTDOWN_DRAIN_DELAY) is what answers
// them. Held writes that cannot end (a lease the test holds) last until
// their API stops. Every write answered 202 (or with its outcome, under
// Prefer: wait) reaches exactly one outcome, read by polling its request;
// seats sold and the counters equal the successes the clients were told;
// no answer is a 5xx but 503 with Retry-After; no exchange with a backend
// fails; every process exits with status 0. Control: the same replacement
// of an API with SHUTDOWN_DRAIN_DELAY=0s: the requests sent to it once it
// is told to stop are refused.
func TestRolloutWithoutLoss(t *testing.T) {
	t.Parallel()
	t.Run("two rollouts", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t, true, rolloutDrainDelay)
		release := f.s.HoldLease(probe.SerialKey(parked), 5*time.Minute)
		r := f.rush(8, 4, true)
		r.waitOutcomes(t, 20)
		for round := 1; round <= 2; round++ {
			for i := range f.apis {
				f.replaceAPI(i, r)
			}
			for i := range f.workers {
				f.replaceWorker(i, r)
			}
			t.Logf("rollout %d done: %d outcomes so far", round, r.count())
		}
		release()
		r.stop()
		r.settleParked()
		require.Empty(t, f.lb.Failures(), "exchanges with a backend failed")
		require.Empty(t, r.problems, "answers a client following the contract should not get")
		r.check(t, f.s)
	})
	t.Run("control without a drain delay", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t, false, "0s")
		r := f.rush(4, 0, false)
		r.waitOutcomes(t, 10)
		f.replaceAPI(0, r)
		r.stop()
		failures := f.lb.Failures()
		t.Logf("%d failed exchanges, e.g. %s; %d answers a client should not get", len(failures), first(failures), len(r.problems))
		require.NotEmpty(t, failures, "the control: requests sent to an API that stopped at once fail")
	})
}

// rolloutDrainDelay is the APIs' SHUTDOWN_DRAIN_DELAY: longer than the
// balancer takes to see a stopping API unready (FailureThreshold checks,
// CheckEvery apart) and to send it stoppingRequests more.
const rolloutDrainDelay = "3s"

// stoppingRequests is how many requests the balancer sends to an API
// after its readiness has failed, before it leaves the rotation.
const stoppingRequests = 5

// stepTimeout bounds each step of a rollout: a process starting or
// stopping, the balancer seeing it.
const stepTimeout = 30 * time.Second

func first(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return s[0]
}

// fleet is a deployment under test: API and worker processes on one
// system, the APIs behind a balancer.
type fleet struct {
	t         *testing.T
	s         *systest.System
	lb        *systest.Balancer
	apis      []*systest.Serving
	workers   []*systest.Serving
	overrides []string // every process's own settings
	started   int      // processes started, for their names
	event     int64    // the FCFS event the rush grabs seats of
}

// newFleet starts two APIs (with SHUTDOWN_DRAIN_DELAY drain) behind a
// balancer and two workers (one for a control), and creates the FCFS event.
func newFleet(t *testing.T, full bool, drain string) *fleet {
	// PG_MAX_CONNS 4: five processes at once, in a rollout's step, hold at
	// most 20 connections, and the test takes a second system slot for them.
	s := systest.Start(t, systest.Options{NoAPI: true, Rush: full, Overrides: []string{"PG_MAX_CONNS", "4"}})
	testenv.Slot(t, "system", 6)
	f := &fleet{t: t, s: s, lb: systest.NewBalancer(t), overrides: []string{"SHUTDOWN_DRAIN_DELAY", drain}}
	f.apis = []*systest.Serving{f.startAPI(), f.startAPI()}
	f.workers = []*systest.Serving{f.startWorker()}
	if full {
		f.workers = append(f.workers, f.startWorker())
	}
	admin := s.Client("admin", domain.RoleAdmin).At(f.lb.URL)
	resp := admin.DoPatiently("POST", "/api/v1/events", map[string]any{"name": "Rollout", "seatCount": 600})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	var e events.Event
	resp.JSON(t, &e)
	f.event = e.EventID
	return f
}

func (f *fleet) name(binary string) string {
	f.started++
	return fmt.Sprintf("%s-%d", binary, f.started)
}

// startAPI starts an API process and waits until the balancer routes to it.
func (f *fleet) startAPI() *systest.Serving {
	p := f.s.StartProcess("api", f.name("api"), f.overrides...)
	f.lb.Add(p.URL)
	f.lb.WaitRouted(p.URL, true, stepTimeout)
	return p
}

// startWorker starts a worker process and waits until its /readyz answers
// 200: it serves its health endpoint once it applies writes.
func (f *fleet) startWorker() *systest.Serving {
	p := f.s.StartProcess("worker", f.name("worker"), f.overrides...)
	require.Eventually(f.t, func() bool {
		resp, err := http.Get(p.URL + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, stepTimeout, 20*time.Millisecond, "worker %s ready", p.Name)
	return p
}

// replaceAPI is a rollout's step for API i: a new API, ready and routed
// to, then the old one stopped.
func (f *fleet) replaceAPI(i int, r *rush) {
	t, lb, old := f.t, f.lb, f.apis[i]
	f.apis[i] = f.startAPI()
	lb.Hold(old.URL)
	require.NoError(t, old.Cmd.Process.Signal(syscall.SIGTERM))
	signalled := time.Now()
	lb.WaitSeen(old.URL, false, stepTimeout) // its readiness failed: it is stopping
	lb.Mark(old.URL)
	lb.WaitSentSinceMark(old.URL, stoppingRequests, stepTimeout)
	lb.Release(old.URL)
	routed := time.Since(signalled)
	require.NoError(t, old.Exited(stepTimeout), "%s exits cleanly", old.Name)
	lb.Remove(old.URL)
	t.Logf("%s replaced by %s: routed to for %s after its SIGTERM, exited after %s (%d outcomes so far)",
		old.Name, f.apis[i].Name, routed.Round(time.Millisecond), time.Since(signalled).Round(time.Millisecond), r.count())
}

// replaceWorker is a rollout's step for worker i: a new worker, ready,
// then, once the rush has reached more outcomes, the old one stopped.
func (f *fleet) replaceWorker(i int, r *rush) {
	t, old := f.t, f.workers[i]
	f.workers[i] = f.startWorker()
	r.waitOutcomes(t, r.count()+10)
	open := f.s.Statuses()
	require.NoError(t, old.Cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, old.Exited(stepTimeout), "%s exits cleanly", old.Name)
	var applied int
	require.NoError(t, f.s.Pool.QueryRow(context.Background(), `SELECT count(*) FROM probe_log WHERE worker = $1`, old.Name).Scan(&applied))
	t.Logf("%s replaced by %s: it applied %d increments; at its SIGTERM %d requests were queued, %d processing",
		old.Name, f.workers[i].Name, applied, open[domain.StatusQueued], open[domain.StatusProcessing])
}

// rush is clients' traffic through the balancer. Each rusher submits
// writes one after another — FCFS grabs by users of their own and probe
// increments of counters with a limit (SKUs with a stock), half of them
// with Prefer: wait — and polls each to its outcome. Each parker keeps one
// write held with Prefer: wait on the parked counter, whose lease the test
// holds: no outcome can come while it does, so a held write lasts until
// the API holding it stops, which must answer it; the parker then sends
// the next, and polls them all once the lease is let go. Every client
// follows the contract: a 503 with Retry-After is sent again (with its
// Idempotency-Key) after the wait it asks for.
type rush struct {
	f       *fleet
	checked bool
	quit    chan struct{}
	done    sync.WaitGroup
	next    atomic.Int64

	mu          sync.Mutex
	outcomes    map[string]outcome // by request id
	parked      []parkedWrite      // answered 202, to poll once the lease is let go
	problems    []string
	unavailable int           // 503 with Retry-After
	progress    chan struct{} // closed, and replaced, on each outcome
}

// outcome is a write's end as its client saw it.
type outcome struct {
	write string // "fcfs" or the probe counter's name
	user  string
	held  bool // sent with Prefer: wait
	cut   bool // sent with Prefer: wait and answered 202: the wait cut short
	view  requests.View
}

type parkedWrite struct {
	c  *systest.Client
	id string
	o  outcome
}

// The probe counters: skus of them, each up to skuStock, and the parked one.
const (
	skus     = 8
	skuStock = 150
	parked   = "parked"
)

// rush starts rushers and parkers; checked clients have every answer
// checked against the OpenAPI document (the control's balancer answers
// 502s it lacks).
func (f *fleet) rush(rushers, parkers int, checked bool) *rush {
	r := &rush{f: f, checked: checked, quit: make(chan struct{}), outcomes: map[string]outcome{}, progress: make(chan struct{})}
	for range rushers {
		r.done.Go(func() { r.loop(r.write) })
	}
	for range parkers {
		r.done.Go(func() { r.loop(r.park) })
	}
	f.t.Cleanup(r.stop)
	return r
}

// plain is the control's HTTP client, whose answers are not checked.
var plain = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: time.Minute}

// loop calls send with a user of its own for each write until the rush stops.
func (r *rush) loop(send func(c *systest.Client, i int)) {
	for {
		select {
		case <-r.quit:
			return
		default:
		}
		i := int(r.next.Add(1))
		c := r.f.s.Client(fmt.Sprintf("fan%d", i), domain.RoleUser).At(r.f.lb.URL)
		if !r.checked {
			c.HTTP = plain
		}
		send(c, i)
	}
}

// stop ends the rush once each client has its last write's outcome (the
// parked counter's lease let go first).
func (r *rush) stop() {
	select {
	case <-r.quit:
	default:
		close(r.quit)
	}
	r.done.Wait()
}

func (r *rush) problem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

func (r *rush) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.outcomes)
}

// waitOutcomes waits until the rush has reached n outcomes.
func (r *rush) waitOutcomes(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(stepTimeout)
	for {
		r.mu.Lock()
		reached, progress, problems := len(r.outcomes) >= n, r.progress, slices.Clone(r.problems)
		r.mu.Unlock()
		if reached {
			return
		}
		select {
		case <-progress:
		case <-deadline:
			t.Fatalf("the rush has not reached %d outcomes in %s (problems: %v)", n, stepTimeout, problems)
		}
	}
}

// unavailableFollowed reports whether resp is a 503 with Retry-After, and
// if it is counts it and waits as long as it asks (FollowRetryAfter).
func (r *rush) unavailableFollowed(resp systest.Response) bool {
	if !resp.FollowRetryAfter() {
		return false
	}
	r.mu.Lock()
	r.unavailable++
	r.mu.Unlock()
	return true
}

// write submits write i, an FCFS grab or an SKU's increment, and polls it
// to its outcome.
func (r *rush) write(c *systest.Client, i int) {
	o := outcome{write: "fcfs", user: c.User, held: i%4 < 2}
	path, body := fmt.Sprintf("/api/v1/events/%d/seats/fcfs", r.f.event), any(nil)
	if i%2 == 1 {
		o.write = fmt.Sprintf("sku%d", i%(2*skus)/2)
		path, body = "/api/v1/probe", probe.Payload{Keys: []string{o.write}, Limit: skuStock}
	}
	wait := ""
	if o.held {
		wait = "wait=5"
	}
	id, held, ok := r.submit(c, i, path, body, wait)
	if !ok {
		return
	}
	o.cut = o.held && held == nil
	r.settle(c, id, held, o)
}

// park submits write i, an increment of the parked counter held with
// Prefer: wait as long as the API allows, and leaves it to be polled
// once the lease is let go.
func (r *rush) park(c *systest.Client, i int) {
	o := outcome{write: parked, user: c.User, held: true}
	id, held, ok := r.submit(c, i, "/api/v1/probe", probe.Payload{Keys: []string{parked}}, "wait=30")
	switch {
	case !ok:
	case held != nil: // the lease was let go
		r.settle(c, id, held, o)
	default:
		o.cut = true
		r.mu.Lock()
		r.parked = append(r.parked, parkedWrite{c, id, o})
		r.mu.Unlock()
	}
}

// settleParked polls every parked write to its outcome.
func (r *rush) settleParked() {
	var wg sync.WaitGroup
	for _, p := range r.parked {
		wg.Go(func() { r.settle(p.c, p.id, nil, p.o) })
	}
	wg.Wait()
	r.parked = nil
}

// submit sends write i (Prefer: wait, unless empty) until it is accepted
// and returns its request id and, if it was answered with its outcome,
// that outcome.
func (r *rush) submit(c *systest.Client, i int, path string, body any, wait string) (string, *requests.View, bool) {
	headers := []string{"Idempotency-Key", "write-" + strconv.Itoa(i)}
	if wait != "" {
		headers = append(headers, "Prefer", wait)
	}
	for {
		resp, err := c.TryDo("POST", path, body, headers...)
		switch {
		case err != nil:
			r.problem("POST %s: %v", path, err)
			return "", nil, false
		case resp.Status == http.StatusAccepted:
			var a systest.Accepted
			if json.Unmarshal(resp.Body, &a) != nil || a.RequestID == "" {
				r.problem("POST %s: 202 %s", path, resp.Body)
				return "", nil, false
			}
			return a.RequestID, nil, true
		case resp.Status == http.StatusOK && wait != "":
			var v requests.View
			if json.Unmarshal(resp.Body, &v) != nil || !v.Status.Terminal() {
				r.problem("POST %s: 200 %s", path, resp.Body)
				return "", nil, false
			}
			return v.RequestID, &v, true
		case r.unavailableFollowed(resp):
		default:
			r.problem("POST %s: %d %s", path, resp.Status, resp.Body)
			return "", nil, false
		}
	}
}

// settle polls request id to its outcome, checks it against the outcome
// it was answered with (held), if any, and records it.
func (r *rush) settle(c *systest.Client, id string, held *requests.View, o outcome) {
	v, ok := r.poll(c, id)
	if !ok {
		return
	}
	if held != nil && (held.Status != v.Status || string(held.Result) != string(v.Result)) {
		r.problem("request %s: answered %s %s, then read as %s %s", id, held.Status, held.Result, v.Status, v.Result)
	}
	o.view = v
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, twice := r.outcomes[id]; twice {
		r.problems = append(r.problems, fmt.Sprintf("request %s accepted for two writes", id))
	}
	r.outcomes[id] = o
	close(r.progress)
	r.progress = make(chan struct{})
}

// poll long-polls request id until it is terminal.
func (r *rush) poll(c *systest.Client, id string) (requests.View, bool) {
	path := "/api/v1/requests/" + id + "?wait=5s"
	deadline := time.Now().Add(45 * time.Second)
	for {
		resp, err := c.TryDo("GET", path, nil)
		var v requests.View
		switch {
		case err != nil:
			r.problem("GET %s: %v", path, err)
			return v, false
		case resp.Status == http.StatusOK:
			if json.Unmarshal(resp.Body, &v) != nil {
				r.problem("GET %s: %s", path, resp.Body)
				return v, false
			}
			if v.Status.Terminal() {
				return v, true
			}
		case r.unavailableFollowed(resp):
		default:
			r.problem("GET %s: %d %s", path, resp.Status, resp.Body)
			return v, false
		}
		if time.Now().After(deadline) {
			r.problem("request %s still %s after 45s", id, v.Status)
			return v, false
		}
	}
}

// check compares what the clients were told with the stores: one outcome
// for each request accepted, and each success applied exactly once.
func (r *rush) check(t *testing.T, s *systest.System) {
	ctx := context.Background()
	rows, err := s.Pool.Query(ctx, `SELECT id::text, status FROM requests`)
	require.NoError(t, err)
	stored := map[string]domain.Status{}
	for rows.Next() {
		var id string
		var st domain.Status
		require.NoError(t, rows.Scan(&id, &st))
		stored[id] = st
	}
	require.NoError(t, rows.Err())
	told := map[string]domain.Status{}
	for id, o := range r.outcomes {
		told[id] = o.view.Status
	}
	require.Equal(t, told, stored, "every request stored is one a client was told of, with the outcome it was told")

	seats, users := map[int64]string{}, map[string]bool{}
	sold := map[string]int{}     // successes by probe counter
	refusals := map[string]int{} // rejections by code
	held, cut, parkedCut := 0, 0, 0
	for id, o := range r.outcomes {
		if o.held {
			held++
		}
		if o.cut {
			cut++
		}
		if o.cut && o.write == parked {
			parkedCut++
		}
		if o.view.Status == domain.StatusRejected {
			refusals[o.view.Error.Code]++
			continue
		}
		require.Equal(t, domain.StatusSucceeded, o.view.Status, "request %s: %+v", id, o.view.Error)
		if o.write != "fcfs" {
			sold[o.write]++
			continue
		}
		var seat events.FCFSResult
		require.NoError(t, json.Unmarshal(o.view.Result, &seat))
		require.NotContains(t, seats, seat.SeatID, "seat %d given twice", seat.SeatID)
		require.False(t, users[o.user], "%s got two seats", o.user)
		require.Equal(t, o.user, seat.ReservedBy)
		seats[seat.SeatID], users[o.user] = o.user, true
	}
	for code := range refusals {
		require.Contains(t, []string{domain.CodeSoldOut, domain.CodeContention, probe.CodeLimitReached}, code)
	}

	reserved := map[int64]string{}
	rows, err = s.Pool.Query(ctx, `SELECT seat_id, user_id FROM seat_reservations WHERE event_id = $1`, r.f.event)
	require.NoError(t, err)
	for rows.Next() {
		var seat int64
		var user string
		require.NoError(t, rows.Scan(&seat, &user))
		reserved[seat] = user
	}
	require.NoError(t, rows.Err())
	require.Equal(t, seats, reserved, "the seats sold are those the clients were told of")
	var taken, marked int
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT seats_taken, (SELECT count(*) FROM seats WHERE event_id = $1 AND reserved)
		FROM events WHERE id = $1`, r.f.event).Scan(&taken, &marked))
	require.Equal(t, []int{len(seats), len(seats)}, []int{taken, marked}, "the event's count and its seats agree")

	for k := range skus + 1 {
		key := fmt.Sprintf("sku%d", k)
		if k == skus {
			key = parked
		} else {
			require.LessOrEqual(t, sold[key], skuStock, key)
		}
		p := s.Probe(key)
		require.Empty(t, p.Violations(), key)
		require.EqualValues(t, sold[key], p.Counter, "%s: sold as many as the clients were told", key)
	}
	var b strings.Builder
	for _, c := range slices.Sorted(maps.Keys(refusals)) {
		fmt.Fprintf(&b, " %s %d", c, refusals[c])
	}
	t.Logf("%d writes reached their outcome (%d sent with Prefer: wait, %d of them answered 202 before it, %d of those parked): %d seats, %d SKU units sold, rejected:%s; %d answers 503 with Retry-After",
		len(r.outcomes), held, cut, parkedCut, len(seats), sumOf(sold)-sold[parked], b.String(), r.unavailable)
	// A parked write's wait ends only when its API stops (or after 30 s).
	require.Positive(t, parkedCut, "held writes were answered when their API stopped")
}

func sumOf(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
