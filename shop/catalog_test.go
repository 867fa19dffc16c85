package shop

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
)

// The periodic tidy-up marks lapsed RESERVED rows EXPIRED and nothing else;
// availability never waited for it. Seeding the demo twice changes nothing.
func TestExpireReservationsAndDemo(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	ctx := context.Background()
	d, err := SeedDemo(ctx, pool)
	require.NoError(t, err)
	again, err := SeedDemo(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, d, again)

	now := time.Now()
	for _, r := range []struct {
		status  string
		expires time.Time
	}{{"RESERVED", now.Add(-time.Minute)}, {"RESERVED", now.Add(time.Minute)}, {"CONFIRMED", now.Add(-time.Minute)}} {
		_, err := pool.Exec(ctx, `INSERT INTO inventory_reservations (product_option_id, user_id, quantity, status, reserved_at, expires_at)
			VALUES ($1, $2, 1, $3, $4, $5)`, d.OptionID, d.UserID, r.status, now.Add(-time.Hour), r.expires)
		require.NoError(t, err)
	}
	c := NewCatalog(pool)
	before, err := c.Stock(ctx, d.OptionID)
	require.NoError(t, err)
	require.Equal(t, 1, before.ReservedQuantity, "the lapsed row already stopped counting")
	n, err := c.ExpireReservations(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	n, err = c.ExpireReservations(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "running it twice is harmless")
	var statuses []string
	rows, err := pool.Query(ctx, `SELECT status FROM inventory_reservations ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		statuses = append(statuses, s)
	}
	require.Equal(t, []string{"EXPIRED", "RESERVED", "CONFIRMED"}, statuses)
	after, err := c.Stock(ctx, d.OptionID)
	require.NoError(t, err)
	require.Equal(t, before, after)
}
