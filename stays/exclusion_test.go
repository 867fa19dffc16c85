package stays

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
)

// The exclusion constraint: many transactions racing to book one room for
// overlapping nights; exactly one wins. The control inserts the same rows as
// Pending, which the constraint does not cover, and all of them go in.
func TestNoRoomBookedTwiceOnANight(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	ctx := context.Background()
	var hotel, rt, room int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO hotels (name, timezone, currency) VALUES ('H', 'UTC', 'EUR') RETURNING id`).Scan(&hotel))
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO room_types (hotel_id, name) VALUES ($1, 'T') RETURNING id`, hotel).Scan(&rt))
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO rooms (hotel_id, room_type_id, number) VALUES ($1, $2, '1') RETURNING id`, hotel, rt).Scan(&room))

	race := func(status string) int {
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := 0
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each books two nights; consecutive attempts overlap by one.
				_, err := pool.Exec(ctx, `INSERT INTO stay_reservations (hotel_id, room_type_id, room_id, user_id, check_in, check_out, status)
					VALUES ($1, $2, $3, 'u', DATE '2031-01-10' + $4::int % 2, DATE '2031-01-12' + $4::int % 2, $5)`, hotel, rt, room, i, status)
				if err == nil {
					mu.Lock()
					won++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return won
	}
	require.Equal(t, 1, race("Confirmed"))
	require.Equal(t, 20, race("Pending"), "without the constraint's cover every overlapping booking goes in")
	// Back-to-back stays share no night: check-out day = next check-in day.
	_, err := pool.Exec(ctx, `INSERT INTO stay_reservations (hotel_id, room_type_id, room_id, user_id, check_in, check_out, status)
		VALUES ($1, $2, $3, 'u', '2031-01-13', '2031-01-15', 'Confirmed')`, hotel, rt, room)
	require.NoError(t, err)
}
