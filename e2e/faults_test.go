package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/apispec"
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
	o.waitAccepted(t, 8, 20*time.Second) // the load is running
	stopRedis()
	// The outage's length is the scenario: five seconds of load against a
	// Redis that is gone, not a wait for anything.
	time.Sleep(5 * time.Second)
	redisAt(t, port)
	// Load runs on against the new, empty Redis for a while; nothing marks
	// an end to wait for.
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
				time.Sleep(20 * time.Millisecond) // a client's pace
			}
		}()
	}
	return wg.Wait
}

// waitAccepted waits until more writes than so far have been answered 202.
func (o *outageLoad) waitAccepted(t *testing.T, more int, timeout time.Duration) {
	t.Helper()
	count := func() int {
		o.mu.Lock()
		defer o.mu.Unlock()
		return len(o.accepted)
	}
	from := count()
	require.Eventually(t, func() bool { return count() >= from+more }, timeout, 10*time.Millisecond,
		"fewer than %d more writes accepted", more)
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
	o.waitAccepted(t, 8, 20*time.Second) // the load is running
	pg.Stop()
	// The outage's length is the scenario: ten seconds, five dependency
	// timeouts, not a wait for anything.
	time.Sleep(10 * time.Second)
	pg.Start()
	o.waitAccepted(t, 8, 30*time.Second) // the API accepts writes again
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
	// How long Postgres stays full is the scenario, not a wait for anything.
	time.Sleep(3 * time.Second)
	release()
	// Load runs on with connections free; writes were accepted while full
	// too, so no count of them marks the recovery.
	time.Sleep(2 * time.Second)
	close(stop)
	wait()
	o.check(t, c, 4*time.Second)
	require.Positive(t, o.statuses[http.StatusServiceUnavailable], "Postgres being full was not felt")
}

// sweepCalls are calls of every documented operation but the streams, with
// ids of the fixtures sweepFixtures makes (each the first of its kind, so
// 1) and bodies that pass input checks, so they reach the stores.
var sweepCalls = []operationSeed{
	{"GET /readyz", "", "", "", "", false},
	{"GET /events/{eventId}/waiting-room", "1", "", "", "", false},
	{"GET /events/{eventId}/seats-page", "1", "", "", "", false},
	{"GET /events/assets/{name}", "waiting-room.js", "", "", "", false},
	{"GET /api/v1/requests/{id}", "0192f5a0-0000-7000-8000-000000000000", "", "", "", false},
	{"GET /api/v1/requests/{id}", "0192f5a0-0000-7000-8000-000000000000", "wait=1s", "", "", false},
	{"POST /api/v1/probe", "", "", `{"keys":["a"]}`, "", false},
	{"POST /api/v1/probe", "", "", `{"keys":["a"]}`, "idem-1", false},
	{"POST /api/v1/hotels", "", "", `{"name":"h2","timezone":"Asia/Seoul","currency":"KRW"}`, "", true},
	{"PATCH /api/v1/hotels/{hotelId}", "1", "", `{"status":"Active"}`, "", true},
	{"POST /api/v1/hotels/{hotelId}/room-types", "1", "", `{"name":"twin"}`, "", true},
	{"PATCH /api/v1/room-types/{roomTypeId}", "1", "", `{"status":"Active"}`, "", true},
	{"POST /api/v1/hotels/{hotelId}/rooms", "1", "", `{"roomTypeId":1,"number":"102"}`, "", true},
	{"PATCH /api/v1/rooms/{roomId}", "1", "", `{"housekeepingStatus":"Clean"}`, "", true},
	{"GET /api/v1/hotels/{hotelId}/reservations", "1", "", "", "", true},
	{"POST /api/v1/reservations/{reservationId}/check-in", "1", "", "", "", true},
	{"POST /api/v1/reservations/{reservationId}/check-out", "1", "", "", "", true},
	{"POST /api/v1/reservations/{reservationId}/cancel", "1", "", "", "", true},
	{"POST /api/v1/holds", "", "", `{"roomTypeId":1,"checkIn":"2031-01-01","checkOut":"2031-01-02","clientHoldKey":"6f1c2a8e-1111-4222-8333-444455556666"}`, "", false},
	{"GET /api/v1/holds/{holdId}", "HOLD", "", "", "", false},
	{"DELETE /api/v1/holds/{holdId}", "HOLD", "", "", "", false},
	{"POST /api/v1/holds/{holdId}/confirm", "HOLD", "", "", "", false},
	{"GET /api/v1/hotels/{hotelId}/availability", "1", "from=2031-01-01&to=2031-01-05", "", "", true},
	{"GET /api/v1/public/hotels/{hotelId}/availability", "1", "from=2031-01-01&to=2031-01-05", "", "", false},
	{"GET /api/v1/hotels/{hotelId}/availability/rooms", "1", "from=2031-01-01&to=2031-01-02", "", "", true},
	{"GET /api/v1/hotels/{hotelId}/availability/check", "1", "roomTypeId=1&from=2031-01-01&to=2031-01-02", "", "", true},
	{"POST /api/v1/users", "", "", `{"name":"n"}`, "", true},
	{"POST /api/v1/products", "", "", `{"name":"p2","options":[{"optionCode":"o2","stockQuantity":3}]}`, "", true},
	{"PATCH /api/v1/product-options/{productOptionId}", "1", "", `{"isActive":true}`, "", true},
	{"GET /api/v1/product-options/{productOptionId}/stock", "1", "", "", "", false},
	{"GET /api/v1/cart", "", "", "", "", false},
	{"PUT /api/v1/cart/items/{productOptionId}", "1", "", `{"quantity":1}`, "", false},
	{"POST /api/v1/orders/reserve", "", "", "", "", false},
	{"DELETE /api/v1/orders/reserve", "", "", "", "", false},
	{"POST /api/v1/orders", "", "", "", "", false},
	{"POST /api/v1/events", "", "", `{"name":"e2","seatCount":2}`, "", true},
	{"PATCH /api/v1/events/{eventId}", "1", "", `{"maxConcurrent":5}`, "", true},
	{"GET /api/v1/events/{eventId}/seats", "1", "", "", "", false},
	{"POST /api/v1/events/{eventId}/seats/fcfs", "1", "", `{"phone":"+821012345678"}`, "", false},
	{"POST /api/v1/events/{eventId}/seats/{seatId}/reservation", "1", "", "", "", false},
	{"GET /api/v1/events/{eventId}/holds", "1", "", "", "", false},
	{"POST /api/v1/events/{eventId}/holds", "1", "", `{"quantity":1}`, "", false},
	{"POST /api/v1/events/{eventId}/holds/{holdId}/confirm", "1", "", `{"paymentReference":"psp-1"}`, "", false},
	{"DELETE /api/v1/events/{eventId}/holds/{holdId}", "1", "", "", "", false},
	{"GET /api/v1/public/events/{eventId}", "1", "", "", "", false},
	{"GET /api/v1/public/events/{eventId}/prequeue", "1", "", "", "", false},
	{"POST /api/v1/events/{eventId}/queue", "1", "", "", "", false},
	{"GET /api/v1/events/{eventId}/queue/status", "1", "", "", "", false},
	{"POST /api/v1/events/{eventId}/queue/token", "1", "", "", "", false},
	{"DELETE /api/v1/events/{eventId}/queue/token", "1", "", "", "", false},
	{"POST /api/v1/events/{eventId}/queue/ticket", "1", "", "", "", false},
}

// sweepFixtures makes one of each thing sweepCalls names, through the API,
// and returns the id of a live hold of user's (sweepCalls' HOLD).
func sweepFixtures(t *testing.T, user, admin *systest.Client) (holdID string) {
	t.Helper()
	for _, f := range []struct{ path, body string }{
		{"/api/v1/hotels", `{"name":"h","timezone":"Asia/Seoul","currency":"KRW"}`},
		{"/api/v1/hotels/1/room-types", `{"name":"double"}`},
		{"/api/v1/hotels/1/rooms", `{"roomTypeId":1,"number":"101"}`},
		{"/api/v1/users", `{"name":"u"}`},
		{"/api/v1/products", `{"name":"p","options":[{"optionCode":"o1","stockQuantity":5}]}`},
		{"/api/v1/events", `{"name":"e","seatCount":3,"entryTokenRequired":false}`},
	} {
		r := admin.Do("POST", f.path, f.body)
		require.Less(t, r.Status, 300, "%s: %s", f.path, r.Body)
	}
	r := user.Do("POST", "/api/v1/holds", `{"roomTypeId":1,"checkIn":"2031-02-01","checkOut":"2031-02-02","clientHoldKey":"0b6a4c1e-2f3d-4e5f-8a9b-0c1d2e3f4a5b"}`)
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	var a systest.Accepted
	r.JSON(t, &a)
	v := user.Wait(a.RequestID, 30*time.Second)
	require.Equal(t, domain.StatusSucceeded, v.Status, "%s", v.Result)
	var hold struct {
		HoldID string `json:"holdId"`
	}
	require.NoError(t, json.Unmarshal(v.Result, &hold))
	require.NotEmpty(t, hold.HoldID)
	return hold.HoldID
}

// Every documented operation, called while Postgres is stopped and then
// while Redis is stopped, answers within the bound with a 2xx, a 4xx or a
// 503 with Retry-After: never another 5xx. Its answers per operation are
// the table in docs/operations.md.
func TestEveryOperationWithADependencyDown(t *testing.T) {
	t.Parallel()
	doc, err := apispec.Load()
	require.NoError(t, err)
	for _, op := range doc.Operations() {
		if strings.HasSuffix(op, "/stream") || slices.Contains([]string{"GET /healthz", "GET /metrics", "GET /openapi.yaml"}, op) {
			continue // streams never end; these need no store
		}
		require.True(t, slices.ContainsFunc(sweepCalls, func(c operationSeed) bool { return c.op == op }), "the sweep leaves out %s", op)
	}
	pg := testenv.PostgresServer(t)
	port := testenv.FreePort(t)
	stopRedis := redisAt(t, port)
	s := systest.Start(t, systest.Options{Workers: 1, Postgres: pg.URL, RedisURL: fmt.Sprintf("redis://127.0.0.1:%d/0", port),
		Overrides: []string{"RATE_LIMIT_PER_USER", "0"}})
	user, admin := s.Client("1", domain.RoleUser), s.Client("sweep-admin", domain.RoleAdmin)
	holdID := sweepFixtures(t, user, admin)
	sweep := func(down string) {
		for _, call := range sweepCalls {
			method, path, _ := strings.Cut(call.op, " ")
			path = pathParam.ReplaceAllLiteralString(path, strings.ReplaceAll(call.param, "HOLD", holdID))
			if call.query != "" {
				path += "?" + call.query
			}
			c := user
			if call.staff {
				c = admin
			}
			var body any
			if call.body != "" {
				body = call.body
			}
			var headers []string
			if call.header != "" {
				headers = []string{"Idempotency-Key", call.header}
			}
			start := time.Now()
			r, err := c.TryDo(method, path, body, headers...)
			took := time.Since(start)
			require.NoError(t, err, "%s down: %s %s", down, method, path)
			t.Logf("%s down: %-55s %d %s", down, call.op, r.Status, errorCodeOf(r))
			require.Less(t, took, 4*time.Second, "%s down: %s %s waited", down, method, path)
			if r.Status >= 500 {
				require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s down: %s %s: %s", down, method, path, r.Body)
				require.NotEmpty(t, r.Header.Get("Retry-After"), "%s down: %s %s", down, method, path)
			}
		}
	}
	pg.Stop()
	sweep("postgres")
	pg.Start()
	stopRedis()
	sweep("redis")
}

// errorCodeOf is the error envelope's code, if the body is one.
func errorCodeOf(r systest.Response) string {
	var e systest.Envelope
	if json.Unmarshal(r.Body, &e) != nil {
		return ""
	}
	return e.Error.Code
}

// A slow Postgres (here: the requests table locked by another session, so
// every INSERT and read of it waits) costs a client DEPENDENCY_TIMEOUT, not
// the length of the stall: writes and polls get 503 with Retry-After, and
// nothing the API refused is stored.
func TestSlowPostgresAnswers503WithinTheBound(t *testing.T) {
	t.Parallel()
	const bound = 500 * time.Millisecond
	s := systest.Start(t, systest.Options{Workers: 1, Overrides: []string{"DEPENDENCY_TIMEOUT", bound.String()}})
	c := s.Client("u", domain.RoleUser)
	id := c.Probe(probe.Payload{Keys: []string{"before"}})
	require.Equal(t, domain.StatusSucceeded, c.Wait(id, 30*time.Second).Status)

	ctx := context.Background()
	tx, err := s.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `LOCK TABLE requests IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	for _, call := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/api/v1/probe", probe.Payload{Keys: []string{"stalled"}}},
		{"GET", "/api/v1/requests/" + id, nil},
		{"GET", "/api/v1/requests/" + id + "?wait=5s", nil},
	} {
		start := time.Now()
		r, err := c.TryDo(call.method, call.path, call.body)
		took := time.Since(start)
		require.NoError(t, err)
		t.Logf("%s %s with Postgres stalled: %d in %v", call.method, call.path, r.Status, took.Round(time.Millisecond))
		require.Equal(t, http.StatusServiceUnavailable, r.Status, "%s %s: %s", call.method, call.path, r.Body)
		require.NotEmpty(t, r.Header.Get("Retry-After"))
		// A write may wait twice: for its INSERT, then to read back whether
		// it committed. Not a speed target: a bound on waiting for a stall.
		require.Less(t, took, 3*bound+time.Second, "%s %s waited on the stall", call.method, call.path)
	}
	require.NoError(t, tx.Rollback(ctx))
	var stalled int
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT count(*) FROM requests WHERE keys @> ARRAY['stalled']`).Scan(&stalled))
	require.Zero(t, stalled, "a write answered 503 was stored")
}
