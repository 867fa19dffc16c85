package keyed

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/metrics"
	"github.com/holdfast/holdfast/requests"
)

type fenceRig struct {
	pgURL, redisURL string
	pool            *pgxpool.Pool
	rdb             redis.UniversalClient
	intake          *requests.Intake
	// scheduleDeferred is its engines' Options.ScheduleDeferred.
	scheduleDeferred bool
}

// newFenceRig is a rig whose engines defer tasks as this run's speed-ups
// say (folded, or scheduled when they are off: testenv.SpeedupsOff).
func newFenceRig(t *testing.T) *fenceRig { return newDeferringRig(t, testenv.SpeedupsOff()) }

// newDeferringRig is newFenceRig with its engines deferring tasks as
// scheduleDeferred says.
func newDeferringRig(t *testing.T, scheduleDeferred bool) *fenceRig {
	pgURL, pool := testenv.Postgres(t)
	redisURL, rdb := testenv.Redis(t)
	_, err := pool.Exec(context.Background(), `CREATE TABLE applied (request_id uuid, worker text, token bigint, at timestamptz DEFAULT clock_timestamp(),
		tx bigint DEFAULT txid_current())`)
	require.NoError(t, err)
	r := &fenceRig{pgURL: pgURL, redisURL: redisURL, pool: pool, rdb: rdb, scheduleDeferred: scheduleDeferred}
	r.intake = r.newIntake(r.engine(t, "intake", 1))
	return r
}

// newIntake is an intake on the rig's Postgres through disp, which stores
// submissions as this run's speed-ups say (testenv.SpeedupsOff).
func (r *fenceRig) newIntake(disp requests.Dispatcher) *requests.Intake {
	in := requests.NewIntake(requests.NewStore(r.pool), disp, slog.Default())
	in.CommitEach = testenv.SpeedupsOff()
	return in
}

// engine builds an engine whose applier records who applied what with which
// token. Its leases last 300 ms, so a test can wait for one to lapse.
func (r *fenceRig) engine(t *testing.T, name string, batch int) *Engine {
	return r.engineTTL(t, name, batch, 300*time.Millisecond)
}

// holdingTTL is the lease lifetime of an engine whose leases must not lapse
// during a test however slowly the machine runs it.
const holdingTTL = time.Minute

// engineTTL is engine with leases that last ttl.
func (r *fenceRig) engineTTL(t *testing.T, name string, batch int, ttl time.Duration) *Engine {
	return r.engineOn(t, name, batch, ttl, r.pool, r.rdb)
}

// engineOn is engineTTL on the given clients.
func (r *fenceRig) engineOn(t *testing.T, name string, batch int, ttl time.Duration, pool *pgxpool.Pool, rdb redis.UniversalClient) *Engine {
	return r.engineWith(t, Options{LeaseTTL: ttl, BatchMax: batch, Worker: name}, pool, rdb)
}

// engineWith is an engine of opt on the given clients, deferring tasks and
// enqueueing as the rig's engines do, with the recording applier.
func (r *fenceRig) engineWith(t *testing.T, opt Options, pool *pgxpool.Pool, rdb redis.UniversalClient) *Engine {
	opt.ScheduleDeferred, opt.EnqueueEach, opt.PlainWaiting = r.scheduleDeferred, testenv.SpeedupsOff(), testenv.SpeedupsOff()
	e := New(pool, rdb, nil, slog.Default(), metrics.NewPipeline(prometheus.NewRegistry()), opt)
	t.Cleanup(func() { _ = e.Close() })
	e.Register(Type{Name: "fence.test", Queue: "q", Applier: ApplierFunc(
		func(ctx context.Context, tx pgx.Tx, b *Batch) ([]requests.Outcome, error) {
			outs := make([]requests.Outcome, len(b.Requests))
			for i, req := range b.Requests {
				if _, err := tx.Exec(ctx, `INSERT INTO applied (request_id, worker, token) VALUES ($1, $2, $3)`,
					req.ID, b.Worker, b.Fences["k"]); err != nil {
					return nil, err
				}
				outs[i] = requests.Succeeded(nil)
			}
			return outs, nil
		})})
	return e
}

func (r *fenceRig) accept(t *testing.T) uuid.UUID {
	req, _, err := r.intake.Accept(context.Background(), requests.Submission{
		Type: "fence.test", Queue: "q", UserID: "u", Keys: []string{"k"}})
	require.NoError(t, err)
	return req.ID
}

type application struct {
	ID     uuid.UUID
	Worker string
	Token  int64
}

// dropFences deletes every key's recorded fence, as if no apply had ever
// recorded its token: the control cases' stand-in for no fencing at all.
func (r *fenceRig) dropFences(t *testing.T) {
	_, err := r.pool.Exec(context.Background(), `DELETE FROM key_fences`)
	require.NoError(t, err)
}

func (r *fenceRig) applied(t *testing.T) []application {
	rows, err := r.pool.Query(context.Background(), `SELECT request_id, worker, token FROM applied ORDER BY at`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[application])
	require.NoError(t, err)
	return out
}

// stalledHolder starts a drain on engine a that stalls after reading its
// batch, waits until its lease has lapsed and lets engine b take the key and
// apply the first request. It returns a function that resumes the stalled
// holder and reports what its Drain returned.
func (r *fenceRig) stalledHolder(t *testing.T, a *Engine, stall *pgStall, b *Engine, first uuid.UUID) func() error {
	ctx := context.Background()
	paused, resume := make(chan struct{}), make(chan struct{})
	stall.set(func() { close(paused); <-resume })
	done := make(chan error, 1)
	go func() { done <- a.Drain(ctx, "k", "q") }()
	<-paused
	require.Eventually(t, func() bool { return r.rdb.Exists(ctx, leaseKey("k")).Val() == 0 },
		5*time.Second, 10*time.Millisecond, "the stalled holder's lease lapses")
	l, ok, err := b.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.True(t, ok)
	g := b.newGroup("q", l)
	g.limit = 1
	_, err = g.step(ctx) // applies the first request alone
	require.NoError(t, err)
	require.Equal(t, first, r.applied(t)[0].ID)
	return func() error { close(resume); return <-done }
}

// K2 fencing: a holder that stalls past its lease cannot commit once a newer
// holder has applied changes to the key.
func TestFencingRefusesLateCommit(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	r1, r2 := r.accept(t), r.accept(t)
	// Only the stalled holder's lease is to lapse: the successor's outlasts
	// the test, so it still holds the key when it finishes.
	a, stall := r.stallingEngine(t, "stalled", 2, 300*time.Millisecond)
	b := r.engineTTL(t, "successor", 1, holdingTTL)

	resume := r.stalledHolder(t, a, stall, b, r1)
	require.NoError(t, resume())
	require.Equal(t, 1.0, testutil.ToFloat64(a.m.LeaseLost.WithLabelValues("q")), "the stalled holder learns it lost the key")
	got := r.applied(t)
	require.Len(t, got, 1, "the stalled holder committed nothing")
	require.Equal(t, application{r1, "successor", got[0].Token}, got[0])

	// The successor still holds the key and finishes it.
	l := Lease{Key: "k", Token: got[0].Token}
	require.NoError(t, b.drainHeld(context.Background(), l, "q"))
	got = r.applied(t)
	require.Len(t, got, 2)
	require.Equal(t, r2, got[1].ID)
	require.Equal(t, "successor", got[1].Worker)
}

// The control case: with the fence the successor recorded gone (as if
// nothing fenced), the same stalled holder commits r2 with its old token
// while the successor holds the key.
func TestFencingControlLateCommitGoesThrough(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	r1, r2 := r.accept(t), r.accept(t)
	// As above, the successor's lease outlasts the test.
	a, stall := r.stallingEngine(t, "stalled", 2, 300*time.Millisecond)
	b := r.engineTTL(t, "successor", 1, holdingTTL)

	resume := r.stalledHolder(t, a, stall, b, r1)
	r.dropFences(t)
	require.NoError(t, resume())
	got := r.applied(t)
	require.Len(t, got, 2)
	require.Equal(t, "successor", got[0].Worker)
	require.Equal(t, application{r2, "stalled", got[1].Token}, got[1])
	require.Less(t, got[1].Token, got[0].Token, "an older lease committed after a newer one")
}

// acceptOn accepts a request on keys.
func (r *fenceRig) acceptOn(t *testing.T, keys ...string) uuid.UUID {
	req, _, err := r.intake.Accept(context.Background(), requests.Submission{
		Type: "fence.test", Queue: "q", UserID: "u", Keys: keys})
	require.NoError(t, err)
	return req.ID
}

// stalledGroup has engine a hold a group of keys k and u and stall after
// reading their mailboxes, until both leases lapse; engine b then takes
// both keys and applies the first request alone. It returns a function
// that resumes the stalled group's step and reports its error.
func (r *fenceRig) stalledGroup(t *testing.T, a *Engine, stall *pgStall, b *Engine, first uuid.UUID) func() error {
	ctx := context.Background()
	lk, ok, err := a.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.True(t, ok)
	lu, ok, err := a.TryAcquire(ctx, "u")
	require.NoError(t, err)
	require.True(t, ok)
	stalled := a.newGroup("q", lk)
	stalled.held[lu.Key] = lu
	paused, resume := make(chan struct{}), make(chan struct{})
	stall.set(func() { close(paused); <-resume })
	done := make(chan error, 1)
	go func() {
		_, err := stalled.step(ctx)
		done <- err
	}()
	<-paused
	require.Eventually(t, func() bool { return r.rdb.Exists(ctx, leaseKey("k"), leaseKey("u")).Val() == 0 },
		5*time.Second, 10*time.Millisecond, "the stalled group's leases lapse")
	g := heldGroup(t, b, "k", "u")
	g.limit = 1
	_, err = g.step(ctx)
	require.NoError(t, err)
	require.Equal(t, first, r.applied(t)[0].ID)
	return func() error { close(resume); return <-done }
}

// K2 for a group: a drain holding several keys that stalls past its leases
// cannot commit once another has taken them and applied a change: every
// key of what it applies is fenced in its transaction.
func TestFencingRefusesAStalledGroup(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	r1, r2 := r.acceptOn(t, "k", "u"), r.acceptOn(t, "k", "u")
	a, stall := r.stallingEngine(t, "stalled", 2, 300*time.Millisecond)
	b := r.engineTTL(t, "successor", 1, holdingTTL)
	resume := r.stalledGroup(t, a, stall, b, r1)
	require.ErrorIs(t, resume(), ErrLeaseLost)
	got := r.applied(t)
	require.Len(t, got, 1, "the stalled group committed nothing")
	require.Equal(t, application{r1, "successor", got[0].Token}, got[0])
	require.NotEqual(t, r2, got[0].ID)
}

// The control: with the successor's fences gone, the stalled group commits
// r2 with its old tokens while the successor holds both keys.
func TestFencingControlStalledGroupCommits(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	r1, r2 := r.acceptOn(t, "k", "u"), r.acceptOn(t, "k", "u")
	a, stall := r.stallingEngine(t, "stalled", 2, 300*time.Millisecond)
	b := r.engineTTL(t, "successor", 1, holdingTTL)
	resume := r.stalledGroup(t, a, stall, b, r1)
	r.dropFences(t)
	require.NoError(t, resume())
	got := r.applied(t)
	require.Len(t, got, 2)
	require.Equal(t, application{r2, "stalled", got[1].Token}, got[1], "an old group committed after the new holder")
	require.Less(t, got[1].Token, got[0].Token)
}

// TryAcquire takes key's lease as a holder outside any drain, the tests'
// stand-in for a drain holding the key; ok is false if it is held.
func (e *Engine) TryAcquire(ctx context.Context, key string) (l Lease, ok bool, err error) {
	tok, _, err := acquired(acquireScript.Run(ctx, e.rdb, []string{leaseKey(key), fenceKey(key), forKey(key)},
		e.opt.LeaseTTL.Milliseconds(), "", e.opt.ForgetAfter.Milliseconds()))
	return Lease{Key: key, Token: tok}, tok > 0, err
}

// heldGroup is a group of e holding keys, each taken with TryAcquire, as a
// drain's group holds the keys it gathered.
func heldGroup(t *testing.T, e *Engine, keys ...string) *group {
	t.Helper()
	var g *group
	for _, k := range keys {
		l := holding(t, e, k)
		if g == nil {
			g = e.newGroup("q", l)
		} else {
			g.held[k] = l
		}
	}
	return g
}

// A transaction fences the keys of the requests it applies, not every key
// its group holds: a key held for a request that waits for another (a
// long-tail option beside a hot one) is neither checked nor written, so a
// group holding hundreds of such keys does not rewrite their rows at every
// step. Its requests' own transaction fences it when they go.
func TestATransactionFencesTheKeysOfWhatItApplies(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	e := r.engineTTL(t, "w", 8, holdingTTL)
	ctx := context.Background()
	onK, onXY := r.acceptOn(t, "k"), r.acceptOn(t, "x", "y")
	holding(t, r.engineTTL(t, "other", 8, holdingTTL), "y")
	g := heldGroup(t, e, "k", "x")
	_, err := g.step(ctx)
	require.NoError(t, err)
	require.False(t, r.open(t, onK))
	require.True(t, r.open(t, onXY), "it waits for y")
	rows, err := r.pool.Query(ctx, `SELECT key FROM key_fences ORDER BY key`)
	require.NoError(t, err)
	fenced, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"k"}, fenced)
}
