package baseline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/storage"
)

// What each of the reserve's locks prevents, forced: two reserves race,
// and each, once its cart fits, waits at a barrier before its INSERT.
// Without the lock both pass their checks before either inserts (the
// controls): the option's last unit goes twice, or one user ends up with
// two reservations. With it the second reserve waits on the lock, so only
// the first reaches the barrier; once it commits, the second reads its
// reservation and is refused.
func TestCartLocksPreventOversellAndDuplicates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		locks cartLocks
		users [2]string
		// options: the two reserves' options, of stock 1 each.
		options  [2]int
		refusal  string // the second's refusal with the lock; "" when both go through
		reserved int    // units reserved in the end
	}{
		{"last unit, options locked", allLocks, [2]string{"ann", "bob"}, [2]int{0, 0}, domain.CodeInsufficientStock, 1},
		{"last unit, options not locked (control)", cartLocks{user: true}, [2]string{"ann", "bob"}, [2]int{0, 0}, "", 2},
		{"one user twice, user locked", allLocks, [2]string{"ann", "ann"}, [2]int{0, 1}, domain.CodeDuplicateReservation, 1},
		{"one user twice, user not locked (control)", cartLocks{options: true}, [2]string{"ann", "ann"}, [2]int{0, 1}, "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, schema, options := cartServer(t, tc.locks)
			arrived := make(chan string, 2)
			release := make(chan struct{})
			s.beforeInsert = func(user string) {
				arrived <- user
				<-release
			}
			errs := make(chan error, 2)
			for i, user := range tc.users {
				go func() {
					_, err := s.reserveItems(context.Background(), user, []CartItem{{ProductOptionID: options[tc.options[i]], Quantity: 1}})
					errs <- err
				}()
			}
			<-arrived
			if tc.refusal != "" {
				require.Eventually(t, func() bool { return waitingOnALock(s, schema) }, 10*time.Second, 5*time.Millisecond,
					"the second reserve waits for the lock")
			} else {
				<-arrived // both passed their checks
			}
			close(release)
			var refusals []string
			for range 2 {
				var r *domain.Problem
				if err := <-errs; errors.As(err, &r) {
					refusals = append(refusals, r.Code)
				} else {
					require.NoError(t, err)
				}
			}
			if tc.refusal != "" {
				require.Equal(t, []string{tc.refusal}, refusals)
			} else {
				require.Empty(t, refusals)
			}
			var reserved int
			require.NoError(t, s.pool.QueryRow(context.Background(),
				"SELECT coalesce(sum(quantity), 0) FROM "+schema+".inventory_reservations WHERE status = 'RESERVED'").Scan(&reserved))
			require.Equal(t, tc.reserved, reserved)
		})
	}
}

// cartServer is a cart mode server (not serving HTTP) with locks, on a
// schema of its own holding two options of one unit each. Its connections
// are named after the schema (waitingOnALock).
func cartServer(t *testing.T, locks cartLocks) (*Server, string, [2]int64) {
	t.Helper()
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "cart_" + hex.EncodeToString(b)
	pgURL, _ := testenv.Postgres(t)
	pool, err := storage.OpenPostgres(ctx, pgURL+"&application_name="+schema, 6)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, Setup(ctx, pool, Cart, schema, 0))
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	s, err := New(pool, Options{Mode: Cart, Schema: schema})
	require.NoError(t, err)
	s.cart = newCartQueries(schema, locks)
	ids, err := NewOptions(ctx, pool, schema, "last one", 1, "a", "b")
	require.NoError(t, err)
	return s, schema, [2]int64(ids)
}

// waitingOnALock reports whether one of the server's connections waits for
// a lock.
func waitingOnALock(s *Server, schema string) bool {
	var n int
	err := s.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND application_name = $1`, schema).Scan(&n)
	return err == nil && n == 1
}
