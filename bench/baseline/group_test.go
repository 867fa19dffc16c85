package baseline_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/bench/baseline"
	"github.com/holdfast/holdfast/client"
)

// lapse makes every live hold of sys's group schema a millisecond past its
// expiry, as its lifetime passing would, on the clock the design judges
// holds by (clock_timestamp() in Postgres): the seats' copy of it too.
func lapse(t *testing.T, sys system) {
	t.Helper()
	ctx := context.Background()
	_, err := sys.pool.Exec(ctx, `UPDATE `+sys.schema+`.seat_holds SET expires_at = clock_timestamp() - interval '1 millisecond'
		WHERE status = 'HELD' AND expires_at > clock_timestamp()`)
	require.NoError(t, err)
	_, err = sys.pool.Exec(ctx, `UPDATE `+sys.schema+`.seats SET held_until = clock_timestamp() - interval '1 millisecond'
		WHERE held_until > clock_timestamp()`)
	require.NoError(t, err)
}

// Many groups race for the seats of a small map (two rows of 8, Front
// before Back) on each locking mode: no seat is held twice, every group
// gets seats side by side in one row or a refusal, and the seats held and
// the seats left free add up. Once the holds lapse (1 s), their seats are
// free again (their expiry moved back, as a clock would move): a new group holds six of them
// side by side and confirms them in time, for good; a confirm after its
// hold lapsed is refused HOLD_EXPIRED.
func TestGroupHoldsRaceOnTheBestRows(t *testing.T) {
	t.Parallel()
	for _, mode := range []baseline.Mode{baseline.Group} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			sys := start(t, mode, 0)
			ev, err := baseline.NewEvent(context.Background(), sys.pool, sys.schema, "race", []client.Section{
				{Name: "Front", Rows: []client.Row{{Label: "A", Seats: 8}}}, {Name: "Back", Rows: []client.Row{{Label: "B", Seats: 8}}}}, 1, 6)
			require.NoError(t, err)
			holds := fmt.Sprintf("%s/%d/holds", baseline.EventsPath, ev)
			var mu sync.Mutex
			got := map[string][]int64{}
			var wg sync.WaitGroup
			for i := range 12 {
				wg.Go(func() {
					user := fmt.Sprint("fan", i)
					a, err := tryCall(sys, http.MethodPost, holds, user, map[string]int{"quantity": 1 + i%3})
					if err != nil || a.status >= 300 {
						require.Contains(t, []string{"SOLD_OUT", "SEATS_NOT_TOGETHER"}, a.code, "%v %s", err, a.body)
						return
					}
					var h client.SeatHold
					a.decode(t, &h)
					mu.Lock()
					got[user] = h.SeatIDs
					mu.Unlock()
				})
			}
			wg.Wait()
			seen, held := map[int64]string{}, 0
			for user, seats := range got {
				slices.Sort(seats)
				for j, s := range seats {
					require.NotContains(t, seen, s, "seat %d held by %s and %s", s, seen[s], user)
					seen[s] = user
					if j > 0 {
						require.Equal(t, seats[j-1]+1, s, "%s's seats %v side by side", user, seats)
					}
				}
				require.True(t, seats[0] > 8 || seats[len(seats)-1] <= 8, "%s's seats %v in one row", user, seats)
				held += len(seats)
			}
			require.Greater(t, held, 8, "both rows were used")
			remaining := func() (n int) { // seats free now
				require.NoError(t, sys.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+sys.schema+`.seats
					WHERE event_id = $1 AND NOT sold AND (held_until IS NULL OR held_until <= clock_timestamp())`, ev).Scan(&n))
				return n
			}
			require.Equal(t, 16-held, remaining())

			lapse(t, sys) // the holds' lifetime passes: what is measured is their lapse
			require.Equal(t, 16, remaining(), "every hold lapsed at its time")
			var h client.SeatHold
			call(t, sys, http.MethodPost, holds, "buyer", map[string]int{"quantity": 6}).decode(t, &h)
			require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, h.SeatIDs, "the Front row's best seats, free again (a fresh schema numbers seats from 1)")
			call(t, sys, http.MethodPost, fmt.Sprintf("%s/%d/confirm", holds, h.HoldID), "buyer", map[string]string{"paymentReference": "p"}).decode(t, &h)
			require.Equal(t, "confirmed", h.Status)
			call(t, sys, http.MethodPost, holds, "late", map[string]int{"quantity": 6}).decode(t, &h)
			lapse(t, sys)
			a := call(t, sys, http.MethodPost, fmt.Sprintf("%s/%d/confirm", holds, h.HoldID), "late", map[string]string{"paymentReference": "p"})
			require.Equal(t, "HOLD_EXPIRED", a.code)
			require.Equal(t, 10, remaining(), "the order stays; the lapsed hold does not")
		})
	}
}
