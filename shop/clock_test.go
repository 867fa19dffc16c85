package shop

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
)

// A reservation's expiry is stamped by its batch with Postgres' clock
// (keyed.Batch.Now), so the tidy-up and the stock read judge it by that
// clock too. Postgres runs ten minutes behind this process here, as behind
// a worker whose clock runs ahead: a reservation with five minutes left by
// Postgres' clock is neither expired nor left out of the stock.
//
// Control: the tidy-up used to take the worker's clock; by it the same
// reservation expired five minutes ago, and marking it EXPIRED would have
// taken it from an owner who may still confirm it.
func TestReservationsExpireByPostgresClock(t *testing.T) {
	t.Parallel()
	pg := testenv.SkewedPostgresServer(t, -10*time.Minute)
	_, pool := testenv.PostgresOn(t, pg.URL)
	ctx := context.Background()
	d, err := SeedDemo(ctx, pool)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO inventory_reservations (product_option_id, user_id, quantity, status, reserved_at, expires_at)
		VALUES ($1, $2, 1, 'RESERVED', now(), now() + interval '5 minutes')`, d.OptionID, d.UserID)
	require.NoError(t, err)

	var byWorkerClock int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM inventory_reservations WHERE status = 'RESERVED' AND expires_at <= $1`,
		time.Now()).Scan(&byWorkerClock))
	require.Equal(t, 1, byWorkerClock, "control: by this process's clock it has expired")

	c := NewCatalog(pool)
	n, err := c.ExpireReservations(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "live by Postgres' clock: not expired")
	st, err := c.Stock(ctx, d.OptionID)
	require.NoError(t, err)
	require.Equal(t, 1, st.ReservedQuantity, "and still counted")
}
