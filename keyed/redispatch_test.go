package keyed

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/requests"
)

// failingDispatch admits through the real engine but cannot dispatch, as
// when Redis fails between a request's commit and its dispatch.
type failingDispatch struct{ *Engine }

func (failingDispatch) Post(context.Context, []*requests.Request) ([]requests.Posting, error) {
	return nil, errors.New("redis unreachable")
}

// redispatchRace makes r1 durable but undispatched, dispatches r2 behind it,
// and drains the key while the reconciler restores r1 between the drain's
// read of the mailbox (which holds only r2) and its apply. afterRedispatch
// runs right after the reconciler.
func redispatchRace(t *testing.T, afterRedispatch func(r *fenceRig)) []application {
	r := newFenceRig(t)
	ctx := context.Background()
	// The drain must keep its lease from the mailbox read to the last apply.
	e, stall := r.stallingEngine(t, "w", 8, holdingTTL)
	broken := r.newIntake(failingDispatch{e})
	first, _, err := broken.Accept(ctx, requests.Submission{Type: "fence.test", Queue: "q", UserID: "u", Keys: []string{"k"}})
	require.NoError(t, err)
	second := r.accept(t)
	require.Equal(t, []string{second.String()}, r.rdb.ZRange(ctx, mboxKey("k"), 0, -1).Val())

	stall.set(func() { // after the drain read its mailbox, before it applies
		require.NoError(t, e.Redispatch(ctx, nil))
		afterRedispatch(r)
	})
	require.NoError(t, e.Drain(ctx, "k", "q"))
	got := r.applied(t)
	require.Len(t, got, 2)
	require.ElementsMatch(t, []any{first.ID, second}, []any{got[0].ID, got[1].ID})
	return got
}

// K3 when a dispatch failed: a request keeps its undispatched mark until it
// is applied, so a drain that read its mailbox before the reconciler put the
// request back still sees the mark and does not overtake it.
func TestRedispatchDuringDrainKeepsOrder(t *testing.T) {
	t.Parallel()
	var first uuid.UUID
	got := redispatchRace(t, func(r *fenceRig) {
		require.NoError(t, r.pool.QueryRow(context.Background(), `SELECT id FROM requests WHERE undispatched`).Scan(&first))
	})
	require.Equal(t, first, got[0].ID, "the earlier, undispatched request is applied first")
}

// The control: with the mark cleared as soon as the request is back in its
// mailbox, the same drain applies the later request first.
func TestRedispatchControlClearedMarkIsOvertaken(t *testing.T) {
	t.Parallel()
	var first uuid.UUID
	got := redispatchRace(t, func(r *fenceRig) {
		require.NoError(t, r.pool.QueryRow(context.Background(),
			`UPDATE requests SET undispatched = false WHERE undispatched RETURNING id`).Scan(&first))
	})
	require.Equal(t, first, got[1].ID, "without the mark the later request overtakes")
}

// A holder whose lease lapsed before it handed the key on (a task of its own
// process may have left a request to it meanwhile) enqueues a drain, as for
// any lost lease; handing on a live lease over an empty mailbox enqueues none.
func TestHandOffOfLapsedLeaseEnqueuesDrain(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	ctx := context.Background()
	e := r.engine(t, "w", 8) // LeaseTTL 300 ms
	// The live lease is taken by an engine whose leases outlast the test,
	// so it is still live when handed on however slowly the test runs.
	holder := r.engineTTL(t, "holder", 8, holdingTTL)
	insp := asynq.NewInspectorFromRedisClient(r.rdb)
	pending := func() int {
		info, err := insp.GetQueueInfo("q")
		if err != nil {
			return 0 // no queue yet
		}
		return info.Pending
	}

	live, ok, err := holder.TryAcquire(ctx, "live")
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, holder.newGroup("q", live).leave(ctx, 0))
	require.Zero(t, pending(), "a released key with nothing queued needs no drain")

	l, ok, err := e.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.True(t, ok)
	require.Eventually(t, func() bool { return r.rdb.Exists(ctx, leaseKey("k")).Val() == 0 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, e.newGroup("q", l).leave(ctx, 0))
	require.Equal(t, 1, pending(), "the lapsed holder asks for a drain")
	tasks, err := insp.ListPendingTasks("q")
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("drain:k:l%d", l.Token), tasks[0].ID)
}

// A mailbox entry that is not a request id as intake writes it (one written
// by hand, an id in capitals) leaves the mailbox and holds nothing up: the
// request behind it is applied, and the key is let go. Had such an entry
// stayed, every drain of the key would have met it again, for ever.
func TestMailboxEntriesThatAreNoIDsAreDropped(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	e := r.engine(t, "w", 8)
	ctx := context.Background()
	for _, junk := range []string{"not-an-id", strings.ToUpper(uuid.NewString())} {
		require.NoError(t, r.rdb.ZAdd(ctx, mboxKey("k"), redis.Z{Score: 0, Member: junk}).Err())
	}
	id := r.accept(t)
	require.NoError(t, e.Drain(ctx, "k", "q"))
	applied := r.applied(t)
	require.Len(t, applied, 1)
	require.Equal(t, id, applied[0].ID)
	require.Zero(t, r.rdb.ZCard(ctx, mboxKey("k")).Val(), "the mailbox is empty")
	require.Zero(t, r.rdb.Exists(ctx, leaseKey("k")).Val(), "and the key let go")
}

// keepAlive extends every lease of a group while a transaction runs (one
// round trip for all of them): a while after they were taken, past a third
// of their lifetime, each has more than two thirds of it left. Without the
// extension none would (the control: the same leases, no keepAlive).
func TestKeepAliveExtendsEveryLeaseOfAGroup(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	const ttl = 3 * time.Second
	e := r.engineTTL(t, "w", 8, ttl)
	ctx := context.Background()
	take := func(prefix string) ([]Lease, time.Time) {
		var ls []Lease
		for i := range 5 {
			l, ok, err := e.TryAcquire(ctx, fmt.Sprintf("%s%d", prefix, i))
			require.NoError(t, err)
			require.True(t, ok)
			ls = append(ls, l)
		}
		return ls, time.Now()
	}
	extended := func(ls []Lease, since time.Time) bool {
		if time.Since(since) < ttl/2 {
			return false
		}
		for _, l := range ls {
			if r.rdb.PTTL(ctx, leaseKey(l.Key)).Val() < 2*ttl/3 {
				return false
			}
		}
		return true
	}

	kept, since := take("alive")
	stop := e.keepAlive(ctx, func() []Lease { return kept })
	defer stop()
	require.Eventually(t, func() bool { return extended(kept, since) }, 10*time.Second, 10*time.Millisecond)

	bare, since := take("bare")
	require.Never(t, func() bool { return extended(bare, since) }, ttl, 10*time.Millisecond,
		"control: without keepAlive no lease has two thirds of its lifetime left after half of it")
}

// K3 is per key: a request waits for an undispatched earlier request only
// when they share a key. Here U, on a and x, failed its dispatch, and when
// it is back in its mailboxes x is held elsewhere, so U waits; R, on c
// alone, which the group holds for M (on a and c, behind U), is applied
// meanwhile. Had the check taken every key the group holds, R would have
// been refused as overtaking U at every step, each refusal dispatching U
// again, until x came free.
func TestUndispatchedRequestHoldsUpOnlyRequestsOnItsKeys(t *testing.T) {
	t.Parallel()
	r, e := undispatchedRig(t, 8, "x")
	r.acceptUndispatched(t, e, "a", "x")
	later := r.acceptOn(t, "c")
	r.acceptOn(t, "a", "c")

	// The drain hands its keys on once cancelled: U and M still wait for x.
	drainWhile(t, e, "a", func() bool { return len(r.applied(t)) == 0 }, "R is applied while U waits")
	got := r.applied(t)
	require.Len(t, got, 1)
	require.Equal(t, later, got[0].ID)
}

// undispatchedRig is a rig with an engine of batchMax and key held by a
// drain of another worker.
func undispatchedRig(t *testing.T, batchMax int, key string) (*fenceRig, *Engine) {
	r := newFenceRig(t)
	_, held, err := r.engineTTL(t, "o", batchMax, holdingTTL).TryAcquire(context.Background(), key)
	require.NoError(t, err)
	require.True(t, held)
	return r, r.engineTTL(t, "w", batchMax, holdingTTL)
}

// acceptUndispatched accepts a request on keys whose dispatch fails.
func (r *fenceRig) acceptUndispatched(t *testing.T, e *Engine, keys ...string) {
	_, _, err := r.newIntake(failingDispatch{e}).Accept(context.Background(),
		requests.Submission{Type: "fence.test", Queue: "q", UserID: "u", Keys: keys})
	require.NoError(t, err)
}

// drainWhile drains key in the background while waiting holds, failing
// after 10 s, then stops the drain and waits until it handed its keys on.
func drainWhile(t *testing.T, e *Engine, key string, waiting func() bool, msg string) {
	ctx, cancel := context.WithCancel(context.Background())
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_ = e.Drain(ctx, key, "q")
	}()
	require.Eventually(t, func() bool { return !waiting() }, 10*time.Second, 10*time.Millisecond, msg)
	cancel()
	<-drained
}

// K3 is per key within a batch too: a batch may hold requests of a key
// behind an undispatched request of another key, so long as on each key
// it applies only requests before it. Here U, on k, failed its dispatch
// and, back in its mailbox, lies beyond k's window (BatchMax 2: A and C,
// which waits for z, held elsewhere). A on k and m, and R on m alone, both
// go before U on every key they name. Checked against the batch's highest
// seq over all its keys (R's), the batch was refused as overtaking U at
// every step, and A and R waited as long as z was held.
func TestABatchOvertakesAnUndispatchedRequestOnNoKeyOfIt(t *testing.T) {
	t.Parallel()
	r, e := undispatchedRig(t, 2, "z")
	first := r.acceptOn(t, "k", "m")
	r.acceptOn(t, "k", "z")
	r.acceptUndispatched(t, e, "k")
	later := r.acceptOn(t, "m")

	// The drain hands its keys on once cancelled: C and U still wait for z.
	drainWhile(t, e, "k", func() bool { return len(r.applied(t)) < 2 }, "A and R are applied while C waits for z")
	got := r.applied(t)
	require.Len(t, got, 2)
	require.Equal(t, []uuid.UUID{first, later}, []uuid.UUID{got[0].ID, got[1].ID})
}

// K3 across a loss of Redis' state: first's 202 reached its client, then
// Redis lost everything (FLUSHALL, a restart without persistence), then
// second was sent on the same key and is alone in the new mailbox. Its
// drain finds Redis without an incarnation and marks every open request
// undispatched before it applies anything (renew), so first is put back
// and applied ahead of second. The control is a Redis that lost the
// mailboxes but kept its incarnation, the check not firing: second goes
// first, and the reconciler puts first back only after it.
func TestALaterRequestDoesNotOvertakeOneRedisLost(t *testing.T) {
	t.Parallel()
	for _, keptIncarnation := range []bool{false, true} {
		t.Run(fmt.Sprintf("keptIncarnation=%t", keptIncarnation), func(t *testing.T) {
			t.Parallel()
			r := newFenceRig(t)
			ctx := context.Background()
			e := r.recoveringEngine(t, "w", r.pool)
			inc := r.rdb.Get(ctx, incarnationKey).Val()
			require.NotEmpty(t, inc)

			first := r.accept(t)
			require.NoError(t, r.rdb.FlushDB(ctx).Err())
			if keptIncarnation {
				require.NoError(t, r.rdb.Set(ctx, incarnationKey, inc, 0).Err())
			}
			second := r.accept(t)
			order := r.appliedOnceRecovered(t, e, e)
			require.Len(t, order, 2)
			if keptIncarnation {
				require.Equal(t, []uuid.UUID{second, first}, order, "the control: second overtakes first")
				return
			}
			require.Equal(t, []uuid.UUID{first, second}, order, "K3: first's 202 came before second was sent")
			require.NotEqual(t, inc, r.rdb.Get(ctx, incarnationKey).Val(), "a new incarnation")
		})
	}
}

// A step reads Redis' incarnation only after its peeks, so its peeks may
// have run in a lost state, before any drain marked the open requests,
// while the read finds the incarnation another drain set in the meantime.
// That drain made its marks before it set the incarnation, so they hold
// second back all the same. The hook sends the drain's peeks, lets the
// other drain renew, then sends the read. The control is an incarnation set
// again without marks, as a renewal that set it first would leave: second
// goes first.
func TestPeeksInALostStateAreHeldBackByTheMarksOfARenewalBeforeTheirRead(t *testing.T) {
	t.Parallel()
	for _, marked := range []bool{true, false} {
		t.Run(fmt.Sprintf("marked=%t", marked), func(t *testing.T) {
			t.Parallel()
			r := newFenceRig(t)
			ctx := context.Background()
			other := r.recoveringEngine(t, "other", r.pool)

			first := r.accept(t)
			require.NoError(t, r.rdb.FlushDB(ctx).Err())
			second := r.accept(t)

			var renewed atomic.Bool
			rdb := r.hookedRedis(t, testenv.OnPipeline(func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
				last := len(cmds) - 1
				if last < 1 || cmds[last].Name() != "get" || renewed.Swap(true) {
					return next(ctx, cmds)
				}
				peeks := next(ctx, cmds[:last])
				if marked {
					require.NoError(t, other.renew(ctx))
				} else {
					require.NoError(t, r.rdb.SetNX(ctx, incarnationKey, "set without marks", 0).Err())
				}
				return errors.Join(peeks, next(ctx, cmds[last:]))
			}))
			d := r.engineOn(t, "d", 8, holdingTTL, r.pool, rdb)
			order := r.appliedOnceRecovered(t, d, other)
			require.True(t, renewed.Load(), "the drain's peeks were split from their read")
			require.Len(t, order, 2)
			if !marked {
				require.Equal(t, []uuid.UUID{second, first}, order, "the control: second overtakes first")
				return
			}
			require.Equal(t, []uuid.UUID{first, second}, order, "K3: first's 202 came before second was sent")
		})
	}
}

// A reconcile pass reads the open keys a page at a time. A key whose
// requests all complete while the pass is between two pages must not shift
// a key it has not reached onto the page it already read: every key still
// open has what Redis lost restored in that one pass. The stall completes
// the first key's request right after the first page is read.
func TestAReconcilePassMissesNoKeyWhenAnEarlierOneCompletesMidway(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	ctx := context.Background()
	n := reconcilePage + 1
	ids := make([]uuid.UUID, n)
	for i := range n {
		ids[i] = r.acceptOn(t, fmt.Sprintf("k%04d", i))
	}
	require.NoError(t, r.rdb.FlushDB(ctx).Err()) // every mailbox lost
	stall := &pgStall{prefix: "SELECT k, min(queue)"}
	pool := r.stallingPool(t, stall)
	e := r.engineOn(t, "w", 8, holdingTTL, pool, r.rdb)
	e.opt.RedriveAfter = -time.Second
	stall.set(func() {
		_, err := r.pool.Exec(ctx, `UPDATE requests SET status = 'succeeded', completed_at = now() WHERE id = $1`, ids[0])
		require.NoError(t, err)
	})
	require.NoError(t, e.Reconcile(ctx))

	var missed []string
	for i := 1; i < n; i++ {
		k := fmt.Sprintf("k%04d", i)
		if r.rdb.ZScore(ctx, mboxKey(k), ids[i].String()).Err() != nil {
			missed = append(missed, k)
		}
	}
	require.Empty(t, missed, "every open key's mailbox restored in the pass")
}

// Redis may lose its state again while a renewal makes its marks: third,
// accepted after the marks began, is lost unmarked. That loss takes the
// renewal's own key too, so the incarnation is not set, and the next look
// renews again, marking third before fourth, sent after third's 202, can
// go. The stall runs right after the renewal's marks. The control is a
// second loss that spares the renewal's key: the incarnation is set, and
// fourth overtakes third.
func TestALossWhileARenewalMarksIsNotMissed(t *testing.T) {
	t.Parallel()
	for _, keptRenewing := range []bool{false, true} {
		t.Run(fmt.Sprintf("keptRenewing=%t", keptRenewing), func(t *testing.T) {
			t.Parallel()
			r := newFenceRig(t)
			ctx := context.Background()
			stall := &pgStall{prefix: "UPDATE requests SET undispatched = true"}
			e := r.recoveringEngine(t, "w", r.stallingPool(t, stall))

			first := r.accept(t)
			require.NoError(t, r.rdb.FlushDB(ctx).Err())
			var third uuid.UUID
			stall.set(func() {
				third = r.accept(t)
				renewing := r.rdb.Get(ctx, renewingKey).Val()
				require.NoError(t, r.rdb.FlushDB(ctx).Err())
				if keptRenewing {
					require.NoError(t, r.rdb.Set(ctx, renewingKey, renewing, 0).Err())
				}
			})
			require.NoError(t, e.renew(ctx))
			fourth := r.accept(t)
			order := r.appliedOnceRecovered(t, e, e)
			require.Len(t, order, 3)
			if keptRenewing {
				require.Equal(t, []uuid.UUID{first, fourth, third}, order, "the control: fourth overtakes third")
				return
			}
			require.Equal(t, []uuid.UUID{first, third, fourth}, order, "K3: third's 202 came before fourth was sent")
		})
	}
}

// A renewal that fails (here Postgres refuses it) lets go of hf:renewing,
// so the next look renews at once instead of after renewTTL; one that
// succeeds lets go of it too.
func TestAFailedRenewalLeavesNoClaimBehind(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	ctx := context.Background()
	pool := r.stallingPool(t, &pgStall{})
	e := r.engineOn(t, "w", 8, holdingTTL, pool, r.rdb)
	pool.Close()
	require.Error(t, e.renew(ctx))
	require.Zero(t, r.rdb.Exists(ctx, renewingKey, incarnationKey).Val(), "neither a claim nor an incarnation")

	require.NoError(t, r.engineTTL(t, "other", 8, holdingTTL).renew(ctx))
	require.Zero(t, r.rdb.Exists(ctx, renewingKey).Val())
	require.NotEmpty(t, r.rdb.Get(ctx, incarnationKey).Val())
}

// A renewal whose marks take longer than renewTTL (many open requests)
// keeps its claim alive meanwhile, and still sets the
// incarnation: otherwise no renewal would ever finish. The stall holds the
// renewal right after its marks for one and a half renewTTL.
func TestARenewalMarkingLongerThanItsClaimsTTLStillRenews(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	ctx := context.Background()
	stall := &pgStall{prefix: "UPDATE requests SET undispatched = true"}
	e := r.engineOn(t, "w", 8, holdingTTL, r.stallingPool(t, stall), r.rdb)
	require.NoError(t, e.renew(ctx))
	require.NoError(t, r.rdb.FlushDB(ctx).Err())
	// The claim's TTL runs on Redis's clock: only real time makes the marks
	// outlast it.
	stall.set(func() { time.Sleep(renewTTL * 3 / 2) })
	require.NoError(t, e.renew(ctx))
	require.NotEmpty(t, r.rdb.Get(ctx, incarnationKey).Val(), "the incarnation is set")
}
