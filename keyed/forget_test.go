package keyed

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// forgetAfter is the ForgetAfter of the engines below: a key's fencing
// state may go a second after its last acquire.
const forgetAfter = time.Second

// forgetFence waits until e.Forget has deleted key's fence row.
func forgetFence(t *testing.T, r *fenceRig, e *Engine, key string) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		_, _, err := e.Forget(ctx)
		require.NoError(t, err)
		var n int
		require.NoError(t, r.pool.QueryRow(ctx, `SELECT count(*) FROM key_fences WHERE key = $1`, key).Scan(&n))
		return n == 0
	}, 10*time.Second, 50*time.Millisecond)
}

// K2 after forgetting: a holder that stalls past its lease stays refused
// once its key's fence row is forgotten, and once another holder has taken
// the key again and re-created it: tokens are handed out by Redis' clock,
// and a token older than ForgetAfter is refused, so neither an absent row
// nor a new one lets the stalled holder commit.
func TestForgottenFencesStillRefuseAStalledHolder(t *testing.T) {
	t.Parallel()
	for _, recreate := range []bool{false, true} {
		name := map[bool]string{false: "forgotten", true: "re-created"}[recreate]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newFenceRig(t)
			r1, r2 := r.accept(t), r.accept(t)
			a, stall := r.stallingEngine(t, "stalled", 2, 300*time.Millisecond)
			b := r.engineTTL(t, "successor", 1, holdingTTL)
			a.opt.ForgetAfter, b.opt.ForgetAfter = forgetAfter, forgetAfter
			resume := r.stalledHolder(t, a, stall, b, r1)
			require.NoError(t, r.rdb.Del(context.Background(), leaseKey("k")).Err(), "the successor lets the key go")
			forgetFence(t, r, b, "k")
			require.Eventually(t, func() bool { return r.rdb.Exists(context.Background(), fenceKey("k")).Val() == 0 },
				10*time.Second, 50*time.Millisecond, "Redis forgets the fence too")
			if recreate {
				c := r.engineTTL(t, "next", 2, holdingTTL)
				c.opt.ForgetAfter = forgetAfter
				require.NoError(t, c.Drain(context.Background(), "k", "q"))
				require.Len(t, r.applied(t), 2, "the forgotten key works again")
			}
			require.NoError(t, resume())
			require.Equal(t, 1.0, testutil.ToFloat64(a.m.LeaseLost.WithLabelValues("q")), "the stalled holder learns it lost the key")
			got := r.applied(t)
			require.Equal(t, r1, got[0].ID)
			for _, g := range got {
				require.NotEqual(t, "stalled", g.Worker, "the stalled holder committed %s", g.ID)
			}
			if !recreate {
				require.Len(t, got, 1, "r2 waits for the next holder")
				require.NotEqual(t, r2, got[0].ID)
			}
		})
	}
}

// K2 after forgetting, for a holder frozen inside its apply transaction
// rather than before it: its fence statement runs ForgetAfter after the
// transaction began. The floor it checks its token against is taken when
// the statement runs (clock_timestamp); taken when the transaction began
// (now(), which stays the transaction's start), it was ForgetAfter too low,
// the frozen holder's token passed once its successor's row was forgotten,
// and it committed after that successor (checked: the test fails so).
func TestAHolderFrozenInItsTransactionStaysRefusedOnceTheFenceIsForgotten(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	ctx := context.Background()
	r1 := r.accept(t)
	r.accept(t)
	stall := &pgStall{prefix: "begin"} // the apply transaction's first statement
	pool := r.stallingPool(t, stall)
	a := r.engineOn(t, "stalled", 2, holdingTTL, pool, r.rdb)
	b := r.engineTTL(t, "successor", 1, holdingTTL)
	a.opt.ForgetAfter, b.opt.ForgetAfter = forgetAfter, forgetAfter

	paused, resume := make(chan struct{}), make(chan struct{})
	stall.set(func() { close(paused); <-resume })
	done := make(chan error, 1)
	go func() { done <- a.Drain(ctx, "k", "q") }()
	<-paused
	// A frozen process extends nothing: its lease lapses (deleted here, as
	// its keepAlive, which runs in the test's process, would extend it).
	require.NoError(t, r.rdb.Del(ctx, leaseKey("k")).Err())
	l, ok, err := b.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.True(t, ok)
	g := b.newGroup("q", l)
	g.limit = 1
	_, err = g.step(ctx) // applies r1 alone
	require.NoError(t, err)
	require.Equal(t, r1, r.applied(t)[0].ID)
	require.NoError(t, r.rdb.Del(ctx, leaseKey("k")).Err(), "the successor lets the key go")
	forgetFence(t, r, b, "k")

	close(resume)
	require.NoError(t, <-done)
	require.Equal(t, 1.0, testutil.ToFloat64(a.m.LeaseLost.WithLabelValues("q")), "the frozen holder learns it lost the key")
	got := r.applied(t)
	require.Len(t, got, 1, "the frozen holder committed nothing")
	require.Equal(t, "successor", got[0].Worker)
}

// The control: checked only against the row, as the fence was before
// tokens carried their time, an older token than the last one that
// committed (a stalled holder's) passes once the row is forgotten; the
// fence refuses it.
func TestForgottenFenceControlNaiveCheckTakesAnOldToken(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	r.accept(t)
	b := r.engineTTL(t, "successor", 1, holdingTTL)
	b.opt.ForgetAfter = forgetAfter
	ctx := context.Background()
	require.NoError(t, b.Drain(ctx, "k", "q"))
	var committed int64
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT token FROM applied`).Scan(&committed))
	forgetFence(t, r, b, "k")
	old := committed - 1 // handed out before the one that committed

	tx, err := r.pool.Begin(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, fence(ctx, tx, []Lease{{Key: "k", Token: old}}, map[string]int64{"k": 0}, forgetAfter), ErrFenced)
	require.NoError(t, tx.Rollback(ctx))

	tx, err = r.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	var accepted int64
	err = tx.QueryRow(ctx, `INSERT INTO key_fences (key, token) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET token = EXCLUDED.token WHERE key_fences.token <= EXCLUDED.token
		RETURNING token`, "k", old).Scan(&accepted)
	require.False(t, errors.Is(err, pgx.ErrNoRows), "the naive check refused")
	require.NoError(t, err)
	require.Equal(t, old, accepted, "the naive check takes an old token once the row is gone")
}

// Forget deletes the fence rows of tokens older than ForgetAfter and the
// progress marks below every open request, and keeps the rest.
func TestForgetDeletesOnlyIdleState(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	e := r.engineTTL(t, "w", 1, holdingTTL)
	e.opt.ForgetAfter = time.Hour
	ctx := context.Background()
	r.accept(t)
	var open int64
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT min(seq) FROM requests WHERE completed_at IS NULL`).Scan(&open))
	now := time.Now().UnixMicro()
	_, err := r.pool.Exec(ctx, `INSERT INTO key_fences (key, token) VALUES ('idle', $1), ('busy', $2)`,
		now-2*time.Hour.Microseconds(), now)
	require.NoError(t, err)
	_, err = r.pool.Exec(ctx, `INSERT INTO key_progress (key, through_seq) VALUES ('past', $1), ('reaching', $2)`, open-1, open)
	require.NoError(t, err)
	fences, marks, err := e.Forget(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, fences)
	require.EqualValues(t, 1, marks)
	rows, err := r.pool.Query(ctx, `SELECT key FROM key_fences UNION ALL SELECT key FROM key_progress ORDER BY 1`)
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"busy", "reaching"}, left)
}
