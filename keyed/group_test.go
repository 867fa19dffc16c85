package keyed

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/recent"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/metrics"
	"github.com/holdfast/holdfast/requests"
)

// keepFor takes key's lease and yields it for whoever holds key holder, as a
// drain does that makes way for a request whose smallest key that is.
func keepFor(t *testing.T, e *Engine, key, holder string) {
	t.Helper()
	ctx := context.Background()
	l, ok, err := e.TryAcquire(ctx, key)
	require.NoError(t, err)
	require.True(t, ok)
	st, err := releaseScript.Run(ctx, e.rdb, []string{leaseKey(key), mboxKey(key), forKey(key)}, l.Token, "force", holder, 60_000).Int()
	require.NoError(t, err)
	require.Equal(t, relEmpty, st, "the mailbox is empty")
}

// A key kept for the holder of key p goes to the group holding p even when
// the group wants it for a request whose smallest key is another one: a
// drain that yields for p cannot know which of p's requests the holder
// gathers first. Asked with the other claim alone, the key stayed refused
// until the promise lapsed, and every request on it waited that long (a
// cart rush's p99 went from about 100 ms to 600 ms).
func TestAKeyKeptForAHeldKeyGoesToItsGroup(t *testing.T) {
	r := newFenceRig(t)
	e := r.engineTTL(t, "w", 8, holdingTTL)
	ctx := context.Background()

	p, ok, err := e.TryAcquire(ctx, "p")
	require.NoError(t, err)
	require.True(t, ok)
	g := e.newGroup("q", p)
	keepFor(t, e, "x", "p")

	got, failed, err := g.acquire(ctx, map[string]string{"x": "a"})
	require.NoError(t, err)
	require.Equal(t, 1, got)
	require.Empty(t, failed)
	require.Contains(t, g.held, "x")

	// Control: the promise still keeps the key from a group that does not
	// hold p, whatever it claims.
	o, ok, err := e.TryAcquire(ctx, "o")
	require.NoError(t, err)
	require.True(t, ok)
	h := e.newGroup("q", o)
	keepFor(t, e, "y", "p")
	got, failed, err = h.acquire(ctx, map[string]string{"y": "a"})
	require.NoError(t, err)
	require.Zero(t, got)
	require.True(t, failed["y"])
	_, ok, err = e.TryAcquire(ctx, "y")
	require.NoError(t, err)
	require.False(t, ok, "a drain task does not take a kept key either")
}

// The backlog samples Admit reads are bounded by the keys posted to lately,
// not by every key the engine ever saw (a shop's users, months of them),
// and a key over its cap is still refused after many others came and went.
func TestBacklogSamplesStayBounded(t *testing.T) {
	r := newFenceRig(t)
	e := New(r.pool, r.rdb, nil, slog.Default(), metrics.NewPipeline(prometheus.NewRegistry()), Options{KeyCap: 2})
	t.Cleanup(func() { _ = e.Close() })
	e.backlog = recent.New[string, backlogSample](time.Minute, 100) // a small bound, and one only size enforces
	ctx := context.Background()
	seq := int64(0)
	post := func(keys ...string) {
		t.Helper()
		rs := make([]*requests.Request, len(keys))
		for i, k := range keys {
			seq++
			rs[i] = &requests.Request{ID: uuid.New(), Seq: seq, Keys: []string{k}}
		}
		_, err := e.Post(ctx, rs)
		require.NoError(t, err)
	}
	post("hot", "hot")
	many := make([]string, 1000)
	for i := range many {
		many[i] = fmt.Sprintf("user:%d", i)
	}
	post(many...)
	require.LessOrEqual(t, e.backlog.Len(), 200, "at most two generations of 100")
	require.NoError(t, e.Admit(ctx, "q", []string{"hot"}), "forgotten, so let through once")
	post("hot")
	var p *domain.Problem
	require.ErrorAs(t, e.Admit(ctx, "q", []string{"hot"}), &p)
	require.Equal(t, domain.CodeOverloaded, p.Code)
	require.NoError(t, e.Admit(ctx, "q", []string{"user:999"}), "a key under its cap")
}

// numberedKeys are prefix000, prefix001, … : n keys in the order intake
// sorts them.
func numberedKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return keys
}

// open is whether request id is still open, as its row says.
func (r *fenceRig) open(t *testing.T, id uuid.UUID) bool {
	var status domain.Status
	require.NoError(t, r.pool.QueryRow(context.Background(), `SELECT status FROM requests WHERE id = $1`, id).Scan(&status))
	return !status.Terminal()
}

// The largest request intake accepts, requests.MaxKeys keys, is applied by a
// drain whose batch is one request, the fewest keys a drain holds
// (maxGroupKeys); a request with one key more is refused at intake, before
// it is stored.
func TestLargestRequestIsAppliedWithABatchOfOne(t *testing.T) {
	r := newFenceRig(t)
	e := r.engineTTL(t, "w", 1, holdingTTL)
	ctx := context.Background()
	keys := numberedKeys("m", requests.MaxKeys+1)

	_, _, err := r.intake.Accept(ctx, requests.Submission{Type: "fence.test", Queue: "q", UserID: "u", Keys: keys})
	p, ok := domain.AsProblem(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, domain.CodeInvalidInput, p.Code)
	var stored int
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT count(*) FROM requests`).Scan(&stored))
	require.Zero(t, stored)

	id := r.acceptOn(t, keys[:requests.MaxKeys]...)
	require.NoError(t, e.Drain(ctx, keys[0], "q"))
	applied := r.applied(t)
	require.Len(t, applied, 1)
	require.Equal(t, id, applied[0].ID)
}

// Control: the bound is what a drain holds. A request of maxGroupKeys keys,
// stored past intake, is applied by one drain; one of a key more never is:
// its drain takes keys up to maxGroupKeys, waits for the rest until its slice
// is over and hands them on, and so on for ever, and every request behind it
// on one of its keys would wait with it.
func TestLargestRequestControlMoreKeysThanADrainHolds(t *testing.T) {
	t.Parallel()
	for _, extra := range []int{0, 1} {
		t.Run(fmt.Sprintf("maxGroupKeys+%d", extra), func(t *testing.T) {
			r := newFenceRig(t)
			e := r.engineWith(t, Options{LeaseTTL: holdingTTL, BatchMax: 1, DrainSlice: time.Second, Worker: "w"}, r.pool, r.rdb)
			ctx := context.Background()
			keys := numberedKeys("m", e.maxGroupKeys()+extra)
			keysJSON, err := json.Marshal(keys)
			require.NoError(t, err)
			req := &requests.Request{ID: uuid.New(), Type: "fence.test", Queue: "q", UserID: "u", Keys: keys}
			require.NoError(t, r.pool.QueryRow(ctx, `INSERT INTO requests (id, type, queue, user_id, keys, payload, trace_id, accepted_at)
				SELECT $1, 'fence.test', 'q', 'u', ARRAY(SELECT jsonb_array_elements_text($2::jsonb)), '{}', '', now() RETURNING seq`,
				req.ID, string(keysJSON)).Scan(&req.Seq))
			require.NoError(t, e.Dispatch(ctx, req))

			// Three drains one after another, as the tasks of handed-on keys
			// would run them; a busy machine may need more than one slice.
			for range 3 {
				require.NoError(t, e.Drain(ctx, keys[0], "q"))
				if !r.open(t, req.ID) {
					break
				}
			}
			if extra == 0 {
				require.False(t, r.open(t, req.ID), "applied")
				require.Len(t, r.applied(t), 1, "its applier ran once")
				return
			}
			require.True(t, r.open(t, req.ID), "the request is still open after three drains' slices")
			require.Empty(t, r.applied(t), "its applier never ran")
			require.Positive(t, testutil.ToFloat64(e.m.HandOffs.WithLabelValues("q")), "its drain ran, and handed its keys on")
		})
	}
}

// A group full of one request's keys still gathers an earlier request's.
// With a batch of one a group holds 66 keys. R1 names a000–a063; R0,
// accepted before it, names a010 and z000–z062. The drain of a000 takes R1's
// keys but a005, which another holder keeps, and meets R0 at the head of
// a010: R0 is this group's to gather (a010 is its smallest key), but its 63
// missing keys do not fit beside R1's. The group hands on the keys R0 does
// not name, then gathers R0's and applies it. Before, it took three of them,
// was full, and waited with neither request applicable until its slice was
// over; the drains of the keys it handed on met the same again.
func TestAFullGroupMakesRoomForTheRequestItGathers(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	e := r.engineWith(t, Options{LeaseTTL: holdingTTL, BatchMax: 1, DrainSlice: 4 * time.Second, Worker: "w"}, r.pool, r.rdb)
	require.Equal(t, 66, e.maxGroupKeys())
	ctx := context.Background()
	r0 := r.acceptOn(t, append([]string{"a010"}, numberedKeys("z", 63)...)...)
	r1 := r.acceptOn(t, numberedKeys("a", 64)...)
	_, ok, err := e.TryAcquire(ctx, "a005")
	require.NoError(t, err)
	require.True(t, ok)

	require.NoError(t, e.Drain(ctx, "a000", "q"))
	require.False(t, r.open(t, r0), "the earlier request is applied within the drain's slice")
	got := r.applied(t)
	require.Len(t, got, 1)
	require.Equal(t, r0, got[0].ID)
	require.True(t, r.open(t, r1), "the later one waits for a005")
}

// A lease that lapsed while its holder was away (a pause past LeaseTTL) is
// found lost when the holder releases its key, emptied. It is handled as
// any lost lease is (lostGroup): LeaseLost counts it, and a drain task
// follows at once for the requests that found the key held meanwhile and
// were left to this holder. The hook lets the lease lapse right before
// the release.
func TestALeaseThatLapsedBeforeItsEmptyKeyIsReleasedIsHandledAsLost(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	ctx := context.Background()
	r.accept(t)
	var lapsed atomic.Bool
	rdb := r.hookedRedis(t, testenv.OnPipeline(func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		if slices.Contains(cmds[0].Args(), any("ifempty")) && !lapsed.Swap(true) {
			require.NoError(t, r.rdb.Del(ctx, leaseKey("k")).Err())
		}
		return next(ctx, cmds)
	}))
	e := r.engineOn(t, "w", 8, holdingTTL, r.pool, rdb)
	_ = e.Drain(ctx, "k", "q")
	require.True(t, lapsed.Load(), "the lease lapsed as the emptied key was released")
	require.Len(t, r.applied(t), 1)
	require.Equal(t, 1.0, testutil.ToFloat64(e.m.LeaseLost.WithLabelValues("q")), "the holder learns it lost the key")
	pending, err := asynq.NewInspectorFromRedisClient(r.rdb).ListPendingTasks("q")
	require.NoError(t, err)
	var drains int
	for _, ti := range pending {
		if strings.HasPrefix(ti.ID, "drain:k:l") {
			drains++
		}
	}
	require.Equal(t, 1, drains, "a drain task follows the lost lease")
}
