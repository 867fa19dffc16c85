package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/internal/lincheck"
	"github.com/holdfast/holdfast/internal/testenv"
)

// An FCFS rush on a Postgres that freezes (SIGSTOP of the postmaster and
// its backends, 5 s, then SIGCONT) 150 answers in, with 8 fans more
// writing into the frozen server (the rush's senders are mostly waiting
// for outcomes when it strikes), from clients that send
// no Idempotency-Key and take any answer but success as final — except a
// 503 with Location (their write's storing in doubt), which they follow to
// its end, as docs/api.md tells them to. Every user who owns a seat was
// told it succeeded; every Location ended in an outcome or NOT_STORED.
// Before the tombstones, the same rush left users told 503 owning seats
// (issue 48: 19,799 seats for 19,798 clients told "succeeded");
// requests.TestAWriteIntoAFrozenPostgresIsSettled shows that control.
func TestFrozenPostgresAppliesNothingBehindANo(t *testing.T) {
	t.Parallel()
	const users, senders, freezeAt, frozenFor, lateFans = 600, 24, 150, 5 * time.Second, 8
	r := newRig(t, rigSpec{apis: 1, workers: 2})
	admin := r.s.Client("admin", domain.RoleAdmin).At(r.URL())
	resp := admin.DoPatiently("POST", "/api/v1/events", map[string]any{"name": "frozen rush", "seatCount": users + lateFans})
	require.Equal(t, http.StatusCreated, resp.Status, "%s", resp.Body)
	var ev events.Event
	resp.JSON(t, &ev)

	var mu sync.Mutex
	told := map[string]lincheck.Answer{}
	byCode := map[string]int{}
	doors := map[string]int{} // the writes' own answers: status, and whether it named a Location
	var slowest time.Duration
	var answered atomic.Int32
	froze := make(chan struct{})
	var next atomic.Int32
	var wg sync.WaitGroup
	fan := func(user string) {
		c := r.s.Client(user, domain.RoleUser).At(r.URL())
		sent := time.Now()
		a := lincheck.Await(c, "POST", fmt.Sprintf("/api/v1/events/%d/seats/fcfs", ev.EventID), nil)
		mu.Lock()
		told[user] = a
		byCode[string(a.Status)+" "+a.Code]++
		doors[fmt.Sprintf("%d located=%t", a.Door, a.Located)]++
		slowest = max(slowest, time.Since(sent))
		mu.Unlock()
	}
	for range senders {
		wg.Go(func() {
			for i := next.Add(1); i <= users; i = next.Add(1) {
				fan(fmt.Sprintf("fan-%d", i))
				if answered.Add(1) == freezeAt {
					close(froze)
				}
			}
		})
	}
	<-froze
	// Most senders wait for their outcome (Prefer: wait) when it strikes;
	// these fans write into the frozen server for sure.
	var f *testenv.Frozen
	outage(frozenFor, func() {
		f = r.pg.Freeze()
		for i := range lateFans {
			wg.Go(func() { fan(fmt.Sprintf("late-fan-%d", i)) })
		}
	}, func() { f.Thaw() })
	n := len(f.Pids)
	wg.Wait()
	t.Logf("froze %d processes for %s; the writes' answers: %v; outcomes by code: %v; slowest, its Location followed: %s",
		n, frozenFor, doors, byCode, slowest)
	require.Positive(t, doors["503 located=true"], "the freeze caught writes whose storing was in doubt")

	rows, err := r.s.Pool.Query(context.Background(), `SELECT user_id FROM seat_reservations WHERE event_id = $1`, ev.EventID)
	require.NoError(t, err)
	owners := 0
	for rows.Next() {
		var user string
		require.NoError(t, rows.Scan(&user))
		owners++
		require.Equal(t, lincheck.StatusOK, told[user].Status, "%s owns a seat but was told %+v", user, told[user].Outcome)
	}
	require.NoError(t, rows.Err())
	succeeded := 0
	for user, a := range told {
		require.NotEqual(t, lincheck.StatusUnknown, a.Status, "%s never learnt its write's fate", user)
		if a.Status == lincheck.StatusOK {
			succeeded++
		}
	}
	require.Equal(t, succeeded, owners, "a seat for each user told it succeeded, and no more")
	require.Len(t, told, users+lateFans)
}
