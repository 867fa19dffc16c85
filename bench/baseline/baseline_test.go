package baseline_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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
	schema string
	srv    *baseline.Server
	mode   baseline.Mode
}

func start(t *testing.T, mode baseline.Mode, seats int) system {
	t.Helper()
	ctx := context.Background()
	sys := system{mode: mode}
	pgURL, _ := testenv.Postgres(t)
	// More connections than testenv's pool, so that requests race in
	// Postgres rather than queue for a connection.
	pool, err := storage.OpenPostgres(ctx, pgURL, 12)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	sys.pool = pool
	sys.schema = string(mode) + "_" + randomName()
	require.NoError(t, baseline.Setup(ctx, pool, mode, sys.schema, seats))
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA "+sys.schema+" CASCADE") })
	srv, err := baseline.New(sys.pool, baseline.Options{Mode: mode, Schema: sys.schema})
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

// outcome tallies a rush and checks what must hold: no seat went to two
// users, no user got two seats, and each success is what Postgres recorded.
type outcome struct {
	successes, soldOut, free int
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
	return o
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
}

func TestRepeatIsAlreadyReserved(t *testing.T) {
	t.Parallel()
	sys := start(t, baseline.Lean, 3)
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
}

func TestNoSeatsIsSoldOut(t *testing.T) {
	t.Parallel()
	sys := start(t, baseline.Lean, 0)
	status, r := reserve(t, sys, "bob", nil)
	require.Equal(t, http.StatusOK, status)
	require.False(t, r.Success)
	require.Equal(t, baseline.SoldOut, *r.Reason)
}

func TestBadRequestsAnswerJSONErrors(t *testing.T) {
	t.Parallel()
	badRequests(t, start(t, baseline.Lean, 1))
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
	databaseErrorIs500(t, start(t, baseline.Lean, 1))
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
