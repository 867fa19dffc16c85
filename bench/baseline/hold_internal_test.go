package baseline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/storage"
)

// What the stock rows' lock prevents, forced: two users hold the last room
// of a night at once, and each, once its hold fits, waits at a barrier
// before its INSERT. Without the lock both pass the count before either
// inserts (the control): two holds on one room. With it the second waits
// on the lock, so only the first reaches the barrier; once it commits, the
// second counts its hold and is refused NOT_AVAILABLE.
func TestHoldLockPreventsOversell(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		locked  bool
		refusal string // the second's refusal; "" when both are granted
		held    int
	}{
		{"stock rows locked", true, domain.CodeNotAvailable, 1},
		{"stock rows not locked (control)", false, "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, schema, roomType := holdServer(t, tc.locked)
			req := HoldRequest{RoomTypeID: roomType, CheckIn: time.Now().UTC().AddDate(0, 0, 1).Format(domain.DateLayout),
				CheckOut: time.Now().UTC().AddDate(0, 0, 2).Format(domain.DateLayout)}
			// The night's stock row exists before the race, as after the
			// first hold of a night.
			_, err := s.pool.Exec(context.Background(), s.holds.ensureNights, roomType, req.CheckIn, req.CheckOut)
			require.NoError(t, err)
			arrived := make(chan string, 2)
			release := make(chan struct{})
			s.beforeInsert = func(user string) {
				arrived <- user
				<-release
			}
			errs := make(chan error, 2)
			for _, user := range []string{"ann", "bob"} {
				go func() {
					r := req
					r.ClientHoldKey = uuid.NewString()
					_, err := s.hold(context.Background(), user, r, 1)
					errs <- err
				}()
			}
			<-arrived
			if tc.refusal != "" {
				require.Eventually(t, func() bool { return waitingOnALock(s, schema) }, 10*time.Second, 5*time.Millisecond,
					"the second hold waits for the lock")
			} else {
				<-arrived // both passed the count
			}
			close(release)
			var refusals []string
			for range 2 {
				var p *domain.Problem
				if err := <-errs; errors.As(err, &p) {
					refusals = append(refusals, p.Code)
				} else {
					require.NoError(t, err)
				}
			}
			if tc.refusal != "" {
				require.Equal(t, []string{tc.refusal}, refusals)
			} else {
				require.Empty(t, refusals)
			}
			var held int
			require.NoError(t, s.pool.QueryRow(context.Background(),
				"SELECT count(*) FROM "+schema+".holds WHERE status = 'HELD'").Scan(&held))
			require.Equal(t, tc.held, held)
		})
	}
}

// holdServer is a hold mode server (not serving HTTP) whose stock rows are
// locked or not, on a schema of its own holding one room type of one room.
// Its connections are named after the schema (waitingOnALock).
func holdServer(t *testing.T, locked bool) (*Server, string, int64) {
	t.Helper()
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "hold_" + hex.EncodeToString(b)
	pgURL, _ := testenv.Postgres(t)
	pool, err := storage.OpenPostgres(ctx, pgURL+"&application_name="+schema, 6)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, Setup(ctx, pool, Holds, schema, 0))
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	s, err := New(pool, Options{Mode: Holds, Schema: schema})
	require.NoError(t, err)
	s.holds = newHoldQueries(schema, locked)
	_, types, err := NewHotel(ctx, pool, schema, 1, 1)
	require.NoError(t, err)
	return s, schema, types[0]
}
