package events

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
)

// An FCFS batch's reads must touch about as many rows as the batch has
// users, late in a rush as early. The event has 5,000 seats, 4,900 of them
// already taken, and the batch 100 users. Each read runs with a plan made
// for the current table (as the worker's custom plans are) and with a
// generic plan cached after the rush's first batch (as a pooled connection
// keeps one); both must stay within 3 rows per user. The free-seat read is
// also checked right after the first batch, when nearly every seat after it
// is free: without the statistics CreateEvent gathers, the planner reads all
// 4,950 of them there.
//
// The controls show the measure catching what it guards against: reading
// free seats from the event's first seat instead of after the last one
// granted, and the plain "user_id = ANY($2)" lookup under the cached plan,
// each examine every seat taken so far.
func TestFCFSReadsDoNotGrowWithSeatsTaken(t *testing.T) {
	_, pool := testenv.Postgres(t)
	ctx := context.Background()
	const seats, taken, batch = 5000, 4900, 100
	e := newEventSettings()
	e.Name, e.TotalSeats = "plans", seats
	ev, err := NewCatalog(pool).CreateEvent(ctx, e, nil)
	require.NoError(t, err)

	users := make([]string, batch)
	for i := range users {
		users[i] = fmt.Sprintf("late-%d", i)
	}
	usersLit := "'{" + strings.Join(users, ",") + "}'"
	const anyHeldSQL = `SELECT user_id, seat_id FROM seat_reservations WHERE event_id = $1 AND user_id = ANY($2)`

	// One connection: prepared statements and their cached plans are its own.
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	exec := func(sql string) {
		t.Helper()
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	reserve := func(n int) (last int64) {
		t.Helper()
		require.NoError(t, conn.QueryRow(ctx, `WITH s AS (
				UPDATE seats SET reserved = true
				WHERE id IN (SELECT id FROM seats WHERE event_id = $1 AND NOT reserved ORDER BY id LIMIT $2)
				RETURNING id),
			r AS (INSERT INTO seat_reservations (event_id, seat_id, user_id) SELECT $1, id, 'early-' || id FROM s)
			SELECT max(id) FROM s`, ev.EventID, n).Scan(&last))
		return last
	}
	// The plans are cached after the rush's first batch.
	first := reserve(batch / 2)
	const bound = 3 * batch
	// Early in the rush nearly every seat after the first batch is free: a
	// plan that reads all of them instead of the batch's worth (which a
	// planner that knows nothing of the event's seats picks) shows here.
	exec(`PREPARE free(bigint, int, bigint) AS ` + freeSeatsSQL)
	exec(`SET plan_cache_mode = force_custom_plan`)
	require.LessOrEqual(t, rowsExamined(t, conn, fmt.Sprintf(`EXECUTE free(%d, %d, %d)`, ev.EventID, batch, first)), bound,
		"free seats early in the rush")
	exec(`SET plan_cache_mode = force_generic_plan`)
	for name, sql := range map[string]string{"held": heldSeatsSQL, "anyheld": anyHeldSQL} {
		exec(fmt.Sprintf(`PREPARE %s(bigint, text[]) AS %s`, name, sql))
		exec(fmt.Sprintf(`EXECUTE %s(%d, %s)`, name, ev.EventID, usersLit)) // caches the generic plan
	}
	exec(fmt.Sprintf(`EXECUTE free(%d, %d, 0)`, ev.EventID, batch))

	// The rush so far: the first 4,900 seats are reserved, as FCFS leaves them.
	last := reserve(taken - batch/2)

	free := fmt.Sprintf(`EXECUTE free(%d, %d, %d)`, ev.EventID, batch, last)
	held := fmt.Sprintf(`EXECUTE held(%d, %s)`, ev.EventID, usersLit)
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		exec(`SET plan_cache_mode = ` + mode)
		require.LessOrEqual(t, rowsExamined(t, conn, free), bound, "free seats, %s", mode)
		require.LessOrEqual(t, rowsExamined(t, conn, held), bound, "held seats, %s", mode)
	}

	// Controls.
	exec(`SET plan_cache_mode = force_custom_plan`)
	require.Greater(t, rowsExamined(t, conn, fmt.Sprintf(`EXECUTE free(%d, %d, 0)`, ev.EventID, batch)), 10*bound,
		"free seats read from the first seat")
	exec(`SET plan_cache_mode = force_generic_plan`)
	require.Greater(t, rowsExamined(t, conn, fmt.Sprintf(`EXECUTE anyheld(%d, %s)`, ev.EventID, usersLit)), 10*bound,
		"held seats by ANY under the plan cached early")
}

// rowsExamined runs sql under EXPLAIN ANALYZE and returns the rows its plan
// examined.
func rowsExamined(t *testing.T, conn *pgxpool.Conn, sql string) int {
	t.Helper()
	var out []byte
	require.NoError(t, conn.QueryRow(context.Background(), `EXPLAIN (ANALYZE, FORMAT JSON) `+sql).Scan(&out), sql)
	var plans []struct{ Plan testenv.PlanNode }
	require.NoError(t, json.Unmarshal(out, &plans))
	return plans[0].Plan.Examined()
}
