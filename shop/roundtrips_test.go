package shop

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/metrics"
	"github.com/holdfast/holdfast/requests"
)

// Round trips per reserve, counted: 200 carts of one or two of five options
// are accepted (intake's part) and then applied by one drain (the worker's
// part). The counts are the per-request round trips; the bounds
// keep them from creeping back to one transaction per cart: the same test
// run on the engine before groups (0cc6b03) counted 23.9 statements and
// 13.8 Redis round trips per reserve in the worker, against 0.22 and 0.10.
func TestReserveRoundTrips(t *testing.T) {
	t.Parallel()
	url, plain := testenv.Postgres(t)
	_, rdb := testenv.Redis(t)
	ctx := context.Background()
	pool, pg := testenv.CountingPool(t, url)
	sent := testenv.WatchRedis(rdb)

	engine := keyed.New(pool, rdb, nil, slog.Default(), metrics.NewPipeline(prometheus.NewRegistry()), keyed.Options{Worker: "rt"})
	t.Cleanup(func() { _ = engine.Close() })
	for _, ty := range (&Writes{TTL: 30 * time.Minute}).Types() {
		engine.Register(ty)
	}
	intake := requests.NewIntake(requests.NewStore(pool), engine, slog.Default())

	c := NewCatalog(plain)
	var opts []Option
	for i := range 5 {
		opts = append(opts, Option{OptionCode: fmt.Sprintf("RT-%d", i), Price: 100, StockQuantity: 300, IsActive: true})
	}
	p, err := c.CreateProduct(ctx, Product{Name: "drop", Options: opts})
	require.NoError(t, err)
	const carts = 200
	subs := make([]requests.Submission, carts)
	for i := range carts {
		u, err := c.CreateUser(ctx, fmt.Sprintf("rt%d", i))
		require.NoError(t, err)
		lines := []Line{{ProductOptionID: p.Options[i%5].ProductOptionID, Quantity: 1}}
		if i%2 == 0 {
			lines = append(lines, Line{ProductOptionID: p.Options[(i+2)%5].ProductOptionID, Quantity: 1})
		}
		options := make([]int64, len(lines))
		for j, l := range lines {
			options[j] = l.ProductOptionID
		}
		body, err := json.Marshal(ReservePayload{UserID: u.UserID, Items: lines})
		require.NoError(t, err)
		subs[i] = requests.Submission{Type: TypeReserve, Queue: Queue, UserID: strconv.FormatInt(u.UserID, 10),
			Keys: keysFor(u.UserID, options), Payload: body}
	}

	pg.Reset()
	sent.Reset()
	for _, sub := range subs {
		_, _, err := intake.Accept(ctx, sub)
		require.NoError(t, err)
	}
	intakePG, intakeRedis := pg.Count(), len(sent.Pipelines())+sent.Alone()

	pg.Reset()
	sent.Reset()
	for open := carts; open > 0; {
		for _, o := range p.Options {
			require.NoError(t, engine.Drain(ctx, OptionKey(o.ProductOptionID), Queue))
		}
		require.NoError(t, plain.QueryRow(ctx, `SELECT count(*) FROM requests WHERE completed_at IS NULL`).Scan(&open))
	}
	workerPG, workerRedis := pg.Count(), len(sent.Pipelines())+sent.Alone()
	var ok int
	require.NoError(t, plain.QueryRow(ctx, `SELECT count(*) FROM requests WHERE status = 'succeeded'`).Scan(&ok))
	require.Equal(t, carts, ok)

	per := func(n int64) float64 { return float64(n) / carts }
	t.Logf("per reserve: intake %.2f statements, %.2f Redis round trips; worker %.2f statements, %.2f Redis round trips",
		per(intakePG), per(int64(intakeRedis)), per(workerPG), per(int64(workerRedis)))
	require.Less(t, per(workerPG), 0.5, "the worker's statements are per batch, not per cart")
	require.Less(t, per(int64(workerRedis)), 0.5, "and so are its Redis round trips")
}
