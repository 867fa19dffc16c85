package baseline_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/bench/baseline"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/storage"
)

// system is a running baseline server on a free port with its own schema.
type system struct {
	url    string
	client *http.Client
	pool   *pgxpool.Pool
	rdb    redis.UniversalClient
	schema string
	srv    *baseline.Server
	mode   baseline.Mode
}

func start(t *testing.T, mode baseline.Mode, seats int) system {
	t.Helper()
	ctx := context.Background()
	sys := system{mode: mode}
	switch {
	case !mode.UsesPostgres():
	case mode.StoresRequests():
		_, sys.pool = testenv.Postgres(t) // migrated to holdfast's schema
	default:
		pgURL, _ := testenv.Postgres(t)
		// More connections than testenv's pool, so that requests race in
		// Postgres rather than queue for a connection.
		pool, err := storage.OpenPostgres(ctx, pgURL, 12)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		sys.pool = pool
		switch mode {
		case baseline.Cart:
			sys.schema = "cart_" + randomName()
			require.NoError(t, baseline.SetupCart(ctx, pool, sys.schema))
		case baseline.Holds:
			sys.schema = "hold_" + randomName()
			require.NoError(t, baseline.SetupHold(ctx, pool, sys.schema))
		case baseline.Group, baseline.GroupSkipLocked:
			sys.schema = "group_" + randomName()
			require.NoError(t, baseline.SetupGroup(ctx, pool, sys.schema))
		default:
			sys.schema = "fcfs_" + randomName()
			require.NoError(t, baseline.Setup(ctx, pool, sys.schema, seats))
		}
		t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA "+sys.schema+" CASCADE") })
	}
	_, sys.rdb = testenv.Redis(t)
	srv, err := baseline.New(sys.pool, sys.rdb, baseline.Options{Mode: mode, Schema: sys.schema, Queue: "baseline-test"})
	require.NoError(t, err)
	sys.srv = srv
	sys.client = &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	sys.url = serve(t, srv, sys.client)
	return sys
}

// serve runs srv on a free port until the test ends and returns its URL.
// client's idle connections are closed first: the server's graceful
// shutdown waits for connections opened but never used.
func serve(t *testing.T, srv *baseline.Server, client *http.Client) string {
	t.Helper()
	return testenv.Serve(t, srv.Serve, client.CloseIdleConnections)
}

func randomName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// reserve posts one reservation as user; body nil sends no body.
func reserve(t *testing.T, sys system, user string, body any) (int, baseline.Reply) {
	t.Helper()
	status, r, err := post(sys, user, body)
	require.NoError(t, err)
	return status, r
}

// post is reserve for goroutines other than the test's.
func post(sys system, user string, body any) (int, baseline.Reply, error) {
	var buf bytes.Buffer
	if body != nil {
		if err := json.NewEncoder(&buf).Encode(body); err != nil {
			return 0, baseline.Reply{}, err
		}
	}
	req, err := http.NewRequest(http.MethodPost, sys.url+baseline.ReservePath, &buf)
	if err != nil {
		return 0, baseline.Reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if user != "" {
		req.Header.Set(baseline.UserHeader, user)
	}
	resp, err := sys.client.Do(req)
	if err != nil {
		return 0, baseline.Reply{}, err
	}
	defer resp.Body.Close()
	var r baseline.Reply
	if resp.StatusCode == http.StatusOK {
		err = json.NewDecoder(resp.Body).Decode(&r)
	}
	return resp.StatusCode, r, err
}

type phone struct {
	Phone string `json:"phone"`
}

// rush sends one reservation for each of users distinct users at once and
// returns the replies by user.
func rush(t *testing.T, sys system, users int) map[string]baseline.Reply {
	t.Helper()
	type answer struct {
		user   string
		status int
		reply  baseline.Reply
		err    error
	}
	answers := make(chan answer, users)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range users {
		user := fmt.Sprintf("user-%03d", i)
		wg.Go(func() {
			<-gate
			status, r, err := post(sys, user, phone{fmt.Sprintf("+8210%08d", i)})
			answers <- answer{user, status, r, err}
		})
	}
	close(gate)
	wg.Wait()
	close(answers)
	replies := make(map[string]baseline.Reply, users)
	for a := range answers {
		require.NoError(t, a.err, a.user)
		require.Equal(t, http.StatusOK, a.status, a.user)
		replies[a.user] = a.reply
	}
	return replies
}

// outcome tallies a rush and checks what must hold in every mode: no seat
// went to two users, no user got two seats, and each success is what
// Postgres recorded.
type outcome struct {
	successes, soldOut, contention, free int
	retries                              int // UPDATEs that found nothing while seats were left
}

func checkRush(t *testing.T, sys system, replies map[string]baseline.Reply, seats int) outcome {
	t.Helper()
	var o outcome
	owner := make(map[int64]string)
	for user, r := range replies {
		if r.Success {
			o.successes++
			require.NotNil(t, r.SeatID, user)
			require.Equal(t, user, *r.ReservedBy)
			prev, taken := owner[*r.SeatID]
			require.False(t, taken, "seat %d went to %s and %s", *r.SeatID, prev, user)
			owner[*r.SeatID] = user
			continue
		}
		require.NotNil(t, r.Reason, user)
		switch *r.Reason {
		case baseline.SoldOut:
			o.soldOut++
			require.Nil(t, r.SeatID)
			require.Nil(t, r.ReservedBy)
		case baseline.Contention:
			o.contention++
			require.Nil(t, r.SeatID)
			require.Equal(t, user, *r.ReservedBy)
		default:
			t.Fatalf("%s: unexpected reason %s", user, *r.Reason)
		}
	}
	require.LessOrEqual(t, o.successes, seats, "oversold")

	ctx := context.Background()
	rows, err := sys.pool.Query(ctx, "SELECT id, reserved_by FROM "+sys.schema+".seats WHERE status")
	require.NoError(t, err)
	defer rows.Close()
	held := make(map[string]int64)
	for rows.Next() {
		var id int64
		var user string
		require.NoError(t, rows.Scan(&id, &user))
		_, dup := held[user]
		require.False(t, dup, "%s holds two seats", user)
		held[user] = id
		require.Equal(t, owner[id], user, "seat %d: reply and table disagree", id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, held, o.successes)
	o.free = seats - o.successes

	n, err := sys.rdb.Get(ctx, baseline.SequenceKey).Int()
	if sys.mode == baseline.Lean {
		require.ErrorIs(t, err, redis.Nil, "the lean mode uses no Redis")
		return o
	}
	require.NoError(t, err)
	require.Equal(t, len(replies), n, "every request counted in Redis")
	o.retries, err = sys.rdb.Get(ctx, baseline.ContentionKey).Int()
	if !errors.Is(err, redis.Nil) {
		require.NoError(t, err)
	}
	return o
}

// Every seat is sold once. A request that finds every remaining seat
// locked by requests about to commit still sees those seats free in the
// cheap sold-out check, retries, and after MaxAttempts such rounds answers
// contention: rare, and only at the very end of a sale (seen about once in
// 30 runs with the CPU saturated). That is the design's, so the test counts
// it rather than forbid it.
func TestSkipLockedSellsEverySeatOnce(t *testing.T) {
	t.Parallel()
	sys := start(t, baseline.SkipLocked, 50)
	o := checkRush(t, sys, rush(t, sys, 100), 50)
	require.Equal(t, 50, o.successes)
	require.Equal(t, 50, o.soldOut+o.contention)
	t.Logf("skiplocked, 100 users for 50 seats: %d sold_out, %d contention, %d retries", o.soldOut, o.contention, o.retries)
}

// The lean design sells every seat once, and a request that finds no free
// seat it can lock is told sold out: with one request per user, a locked
// seat is one about to be sold.
func TestLeanSellsEverySeatOnce(t *testing.T) {
	t.Parallel()
	sys := start(t, baseline.Lean, 50)
	o := checkRush(t, sys, rush(t, sys, 100), 50)
	require.Equal(t, 50, o.successes)
	require.Equal(t, 50, o.soldOut)
	require.Zero(t, o.contention+o.retries, "one statement a request, never retried")
}

// The seed's UPDATE taken literally never oversells, but concurrent
// requests pick the same first free seat and all but one update nothing and
// retry; a request that loses MaxAttempts times answers contention while
// seats are left.
func TestLiteralNeverOversells(t *testing.T) {
	t.Parallel()
	sys := start(t, baseline.Literal, 50)
	o := checkRush(t, sys, rush(t, sys, 100), 50)
	require.Equal(t, 100, o.successes+o.soldOut+o.contention)
	t.Logf("literal, 100 users for 50 seats: %d sold, %d sold_out, %d contention, %d seats left unsold, %d retries",
		o.successes, o.soldOut, o.contention, o.free, o.retries)
}

// The difference between the modes, forced (seed §11): while another
// transaction has taken seat 1 and not yet committed, a literal request
// waits for it, then updates nothing and retries; a skiplocked request
// takes seat 2 at once.
func TestLiteralWaitsAndRetriesWhereSkipLockedMovesOn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode    baseline.Mode
		retries int
	}{
		{baseline.Literal, 1},
		{baseline.SkipLocked, 0},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			t.Parallel()
			sys := start(t, tc.mode, 2)
			ctx := context.Background()
			tx, err := sys.pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx)
			_, err = tx.Exec(ctx, "UPDATE "+sys.schema+".seats SET status = true, reserved_by = 'early' WHERE id = 1")
			require.NoError(t, err)

			type answer struct {
				reply baseline.Reply
				err   error
			}
			answered := make(chan answer, 1)
			go func() {
				_, r, err := post(sys, "late", nil)
				answered <- answer{r, err}
			}()
			if tc.mode == baseline.Literal {
				require.Eventually(t, func() bool {
					var waiting int
					err := sys.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
						WHERE wait_event_type = 'Lock' AND position($1 in query) > 0`, sys.schema).Scan(&waiting)
					return err == nil && waiting == 1
				}, 10*time.Second, 10*time.Millisecond, "the literal request waits for seat 1")
				require.NoError(t, tx.Commit(ctx))
			}
			a := <-answered
			require.NoError(t, a.err)
			require.True(t, a.reply.Success)
			require.EqualValues(t, 2, *a.reply.SeatID)
			retries, err := sys.rdb.Get(ctx, baseline.ContentionKey).Int()
			if errors.Is(err, redis.Nil) {
				err = nil
			}
			require.NoError(t, err)
			require.Equal(t, tc.retries, retries)
		})
	}
}

func TestRepeatIsAlreadyReserved(t *testing.T) {
	t.Parallel()
	for _, mode := range []baseline.Mode{baseline.Literal, baseline.SkipLocked, baseline.Lean} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			sys := start(t, mode, 3)
			status, first := reserve(t, sys, "alice", phone{"+821012345678"})
			require.Equal(t, http.StatusOK, status)
			require.True(t, first.Success)
			require.Nil(t, first.Reason)
			require.EqualValues(t, 1, *first.SeatID, "seats go in id order")

			status, again := reserve(t, sys, "alice", nil) // the seed allows an empty body
			require.Equal(t, http.StatusOK, status)
			require.False(t, again.Success)
			require.Equal(t, baseline.AlreadyReserved, *again.Reason)
			require.Equal(t, *first.SeatID, *again.SeatID)
			require.Equal(t, "alice", *again.ReservedBy)

			var ph string
			require.NoError(t, sys.pool.QueryRow(context.Background(),
				"SELECT phone FROM "+sys.schema+".seats WHERE id = $1", *first.SeatID).Scan(&ph))
			require.Equal(t, "+821012345678", ph)
		})
	}
}

func TestNoSeatsIsSoldOut(t *testing.T) {
	t.Parallel()
	for _, mode := range []baseline.Mode{baseline.SkipLocked, baseline.Lean} {
		sys := start(t, mode, 0)
		status, r := reserve(t, sys, "bob", nil)
		require.Equal(t, http.StatusOK, status, mode)
		require.False(t, r.Success, mode)
		require.Equal(t, baseline.SoldOut, *r.Reason, mode)
	}
}

func TestBadRequestsAnswerJSONErrors(t *testing.T) {
	t.Parallel()
	for _, mode := range []baseline.Mode{baseline.SkipLocked, baseline.Lean} {
		badRequests(t, start(t, mode, 1))
	}
}

func badRequests(t *testing.T, sys system) {
	for _, tc := range []struct {
		name, user, body string
	}{
		{"no user", "", `{"phone":"+821012345678"}`},
		{"malformed body", "carol", `{"phone":`},
	} {
		req, err := http.NewRequest(http.MethodPost, sys.url+baseline.ReservePath, bytes.NewBufferString(tc.body))
		require.NoError(t, err)
		if tc.user != "" {
			req.Header.Set(baseline.UserHeader, tc.user)
		}
		resp, err := sys.client.Do(req)
		require.NoError(t, err)
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, tc.name)
		require.Equal(t, "validation_failed", e.Error.Code, tc.name)
	}
}

func TestDatabaseErrorIs500(t *testing.T) {
	t.Parallel()
	for _, mode := range []baseline.Mode{baseline.Literal, baseline.Lean} {
		databaseErrorIs500(t, start(t, mode, 1))
	}
}

func databaseErrorIs500(t *testing.T, sys system) {
	_, err := sys.pool.Exec(context.Background(), "DROP TABLE "+sys.schema+".seats")
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, sys.url+baseline.ReservePath, nil)
	require.NoError(t, err)
	req.Header.Set(baseline.UserHeader, "dave")
	resp, err := sys.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	require.Equal(t, "internal_error", e.Error.Code)
}

func TestEnqueueModeEnqueuesOneTask(t *testing.T) {
	t.Parallel()
	sys := start(t, baseline.Enqueue, 0)
	resp, err := sys.client.Post(sys.url+baseline.EnqueuePath, "application/json", nil)
	require.NoError(t, err)
	var body struct{ TaskID string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)

	inspector := asynq.NewInspectorFromRedisClient(sys.rdb)
	pending, err := inspector.ListPendingTasks("baseline-test")
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, baseline.TaskType, pending[0].Type)
	require.Equal(t, body.TaskID, pending[0].ID)

	// The seat endpoint is not served in this mode.
	status, _ := reserve(t, sys, "erin", nil)
	require.Equal(t, http.StatusNotFound, status)

	require.NoError(t, sys.srv.Close())
	queues, err := inspector.Queues()
	require.NoError(t, err)
	require.NotContains(t, queues, "baseline-test", "queue removed on Close")
	_, err = inspector.GetTaskInfo("baseline-test", body.TaskID)
	require.ErrorIs(t, err, asynq.ErrQueueNotFound)
}

// The durable mode answers 202 only once the request is a row in holdfast's
// requests table, and enqueues one task under the request's id; a body that
// is not JSON is refused with 400 and stores nothing.
func TestDurableModeStoresThenEnqueues(t *testing.T) {
	t.Parallel()
	sys := start(t, baseline.Durable, 0)
	resp, err := sys.client.Post(sys.url+baseline.EnqueuePath, "application/json", bytes.NewBufferString(`{"n": 7}`))
	require.NoError(t, err)
	var body struct{ RequestID string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)

	var payload string
	require.NoError(t, sys.pool.QueryRow(context.Background(),
		`SELECT payload::text FROM requests WHERE id = $1 AND status = 'queued'`, body.RequestID).Scan(&payload))
	require.JSONEq(t, `{"n": 7}`, payload)
	inspector := asynq.NewInspectorFromRedisClient(sys.rdb)
	pending, err := inspector.ListPendingTasks("baseline-test")
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, body.RequestID, pending[0].ID)

	resp, err = sys.client.Post(sys.url+baseline.EnqueuePath, "application/json", bytes.NewBufferString(`{`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	var rows int
	require.NoError(t, sys.pool.QueryRow(context.Background(), `SELECT count(*) FROM requests`).Scan(&rows))
	require.Equal(t, 1, rows)

	require.NoError(t, sys.srv.Close())
	queues, err := inspector.Queues()
	require.NoError(t, err)
	require.NotContains(t, queues, "baseline-test", "queue removed on Close")
}

// The roundtrip mode stores each request and answers a long poll for it
// once a roundtrip-tasks process has run its task: 200 concurrent
// submit-and-poll round trips all end succeeded, each well before its
// poll's wait (woken by the announcement, not by the wait running out),
// each request a row in the requests table. A poll that comes before the
// task runs (the queue paused) waits its whole wait and answers queued, and
// succeeded once the task has run.
func TestRoundTripModeAnswersThePollOnceTheTaskHasRun(t *testing.T) {
	t.Parallel()
	sys := start(t, baseline.RoundTrip, 0)
	tasks, err := baseline.New(nil, sys.rdb, baseline.Options{Mode: baseline.RoundTripTasks, Queue: "baseline-test"})
	require.NoError(t, err, "the worker needs no Postgres")
	_, err = baseline.New(nil, sys.rdb, baseline.Options{Mode: baseline.RoundTrip})
	require.Error(t, err, "the handler stores requests in Postgres")
	serve(t, tasks, sys.client)
	ctx := context.Background()

	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() { errs <- roundTrip(sys, i) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var rows int
	require.NoError(t, sys.pool.QueryRow(ctx, `SELECT count(*) FROM requests WHERE type = $1`, baseline.TaskType).Scan(&rows))
	require.Equal(t, n, rows)

	inspector := asynq.NewInspectorFromRedisClient(sys.rdb)
	require.NoError(t, inspector.PauseQueue("baseline-test"))
	id, err := submitRoundTrip(sys, n)
	require.NoError(t, err)
	polled := time.Now()
	status, err := pollRoundTrip(sys, id, "300ms")
	require.NoError(t, err)
	require.Equal(t, "queued", status, "the task cannot have run: its queue is paused")
	require.GreaterOrEqual(t, time.Since(polled), 300*time.Millisecond, "the poll waited")
	require.NoError(t, inspector.UnpauseQueue("baseline-test"))
	status, err = pollRoundTrip(sys, id, "30s")
	require.NoError(t, err)
	require.Equal(t, "succeeded", status)

	for _, bad := range []string{"not-a-uuid?wait=1s", id + "?wait=soon", id + "?wait=-1s"} {
		resp, err := sys.client.Get(sys.url + baseline.StatusPath + bad)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
	}
}

// roundTrip submits one write and polls it with a 30-second wait, which it
// must not need: its task runs at once.
func roundTrip(sys system, i int) error {
	id, err := submitRoundTrip(sys, i)
	if err != nil {
		return err
	}
	polled := time.Now()
	status, err := pollRoundTrip(sys, id, "30s")
	switch took := time.Since(polled); {
	case err != nil:
		return err
	case status != "succeeded":
		return fmt.Errorf("request %s: %s", id, status)
	case took > 20*time.Second:
		return fmt.Errorf("request %s: answered after %s, at its wait's end", id, took)
	}
	return nil
}

func submitRoundTrip(sys system, i int) (string, error) {
	var body struct{ RequestID, StatusURL string }
	resp, err := sys.client.Post(sys.url+baseline.EnqueuePath, "application/json", bytes.NewBufferString(fmt.Sprintf(`{"n": %d}`, i)))
	if err := readJSON(resp, err, http.StatusAccepted, &body); err != nil {
		return "", err
	}
	if body.StatusURL != baseline.StatusPath+body.RequestID {
		return "", fmt.Errorf("202 %+v: statusUrl is not the request's", body)
	}
	return body.RequestID, nil
}

func pollRoundTrip(sys system, id, wait string) (string, error) {
	var body struct{ RequestID, Status string }
	resp, err := sys.client.Get(sys.url + baseline.StatusPath + id + "?wait=" + wait)
	if err := readJSON(resp, err, http.StatusOK, &body); err != nil {
		return "", err
	}
	if body.RequestID != id {
		return "", fmt.Errorf("poll for %s answered %+v", id, body)
	}
	return body.Status, nil
}

// readJSON decodes the answer to a call into v when the call went through
// with status.
func readJSON(resp *http.Response, err error, status int, v any) error {
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("HTTP %d: %w", resp.StatusCode, err)
	}
	if resp.StatusCode != status {
		return fmt.Errorf("HTTP %d, want %d: %+v", resp.StatusCode, status, v)
	}
	return nil
}

// The roundtrip mode runs no tasks itself: with no roundtrip-tasks process,
// a request's task stays pending and its poll answers queued once its wait
// passes. A poll still waiting when the server shuts down is answered then,
// queued, instead of holding the shutdown up for the rest of its wait.
func TestRoundTripModeRunsNoTasksAndEndsPollsAtShutdown(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	_, rdb := testenv.Redis(t)
	srv, err := baseline.New(pool, rdb, baseline.Options{Mode: baseline.RoundTrip, Queue: "baseline-alone", ShutdownTimeout: time.Minute})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	sys := system{url: "http://" + ln.Addr().String(), client: &http.Client{Timeout: time.Minute}}

	id, err := submitRoundTrip(sys, 1)
	require.NoError(t, err)
	status, err := pollRoundTrip(sys, id, "300ms")
	require.NoError(t, err)
	require.Equal(t, "queued", status)
	pending, err := asynq.NewInspectorFromRedisClient(rdb).ListPendingTasks("baseline-alone")
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, id, pending[0].ID)

	type answer struct {
		status string
		err    error
	}
	polled := make(chan answer, 1)
	go func() {
		status, err := pollRoundTrip(sys, id, "30s")
		polled <- answer{status, err}
	}()
	// The poll must be waiting in the server before the shutdown, and
	// nothing observable says it is.
	time.Sleep(time.Second)
	cancel()
	select {
	case a := <-polled:
		require.NoError(t, a.err)
		require.Equal(t, "queued", a.status)
	case <-time.After(15 * time.Second):
		t.Fatal("the poll held the shutdown up")
	}
	sys.client.CloseIdleConnections()
	require.NoError(t, <-served)
	require.NoError(t, srv.Close())
}
