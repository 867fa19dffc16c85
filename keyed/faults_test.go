package keyed

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/storage"
)

// Fault injection for the control cases, around the real clients: the
// engine under test runs its production code, and these wrappers stall or
// reorder what it sends.

// pgStall is a pgx tracer that calls the function set last, once per
// setting, when a statement whose SQL starts with prefix has run: a holder
// stalls there, as a real one may (a pause, a slow network).
type pgStall struct {
	prefix string
	mu     sync.Mutex
	fn     func()
}

// set arms the stall: fn runs after the next matching statement.
func (s *pgStall) set(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fn = fn
}

type stallMark struct{}

func (s *pgStall) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(strings.TrimSpace(d.SQL), s.prefix) {
		return context.WithValue(ctx, stallMark{}, true)
	}
	return ctx
}

func (s *pgStall) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ctx.Value(stallMark{}) == nil {
		return
	}
	s.mu.Lock()
	fn := s.fn
	s.fn = nil
	s.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// stallBeforeApply is where a drain stalls between reading its mailboxes
// and its apply transaction: after it marked its keys' progress, before its
// lease is kept alive for the transaction.
const stallBeforeApply = "INSERT INTO key_progress"

// stallingEngine is engineTTL on a pool of its own whose stall runs after
// the drain's last statement before its apply transaction.
func (r *fenceRig) stallingEngine(t *testing.T, name string, batch int, ttl time.Duration) (*Engine, *pgStall) {
	stall := &pgStall{prefix: stallBeforeApply}
	return r.engineOn(t, name, batch, ttl, r.stallingPool(t, stall), r.rdb), stall
}

// recoveringEngine is an engine on pool, on a Redis it renewed, whose
// reconciler restores every open request.
func (r *fenceRig) recoveringEngine(t *testing.T, name string, pool *pgxpool.Pool) *Engine {
	e := r.engineOn(t, name, 8, holdingTTL, pool, r.rdb)
	e.opt.RedriveAfter = -time.Second
	require.NoError(t, e.renew(context.Background()))
	return e
}

// appliedOnceRecovered drains k with d (the last request's task), then runs
// a reconcile pass and the drain it enqueued with e, and returns the ids
// applied, in order.
func (r *fenceRig) appliedOnceRecovered(t *testing.T, d, e *Engine) []uuid.UUID {
	ctx := context.Background()
	require.NoError(t, d.Drain(ctx, "k", "q"))
	require.NoError(t, e.Reconcile(ctx))
	require.NoError(t, e.Drain(ctx, "k", "q")) // the reconciler's drain, if anything is left
	var ids []uuid.UUID
	for _, a := range r.applied(t) {
		ids = append(ids, a.ID)
	}
	return ids
}

// stallingPool is a pool of the rig's Postgres of its own, traced by stall.
func (r *fenceRig) stallingPool(t *testing.T, stall *pgStall) *pgxpool.Pool {
	pool, err := storage.OpenPostgres(context.Background(), r.pgURL, 4, func(c *pgxpool.Config) { c.ConnConfig.Tracer = stall })
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// leaseReadFirst is a go-redis hook that sends a pipeline's EXISTS reads
// (Post's lease reads) in a round trip of their own before the rest, and
// calls between in the gap once: the wrong order, for the control of
// TestDeferredTasksLeaveNoRequestBehind.
type leaseReadFirst struct {
	once    sync.Once
	between func()
}

func (h *leaseReadFirst) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *leaseReadFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *leaseReadFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var reads, rest []redis.Cmder
		for _, c := range cmds {
			if c.Name() == "exists" {
				reads = append(reads, c)
			} else {
				rest = append(rest, c)
			}
		}
		if len(reads) == 0 || len(rest) == 0 {
			return next(ctx, cmds)
		}
		if err := next(ctx, reads); err != nil {
			return err
		}
		h.once.Do(h.between)
		return next(ctx, rest)
	}
}

// leaseReadingFirstEngine is an engine whose Redis client sends Post's lease
// reads before its mailbox adds, calling between in the gap.
func (r *fenceRig) leaseReadingFirstEngine(t *testing.T, name string, between func()) *Engine {
	return r.engineOn(t, name, 1, 300*time.Millisecond, r.pool, r.hookedRedis(t, &leaseReadFirst{between: between}))
}

// hookedRedis is a client of the rig's Redis of its own, with hook.
func (r *fenceRig) hookedRedis(t *testing.T, hook redis.Hook) *redis.Client {
	opt, err := redis.ParseURL(r.redisURL)
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(hook)
	return rdb
}
