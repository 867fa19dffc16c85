package keyed

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

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
	stop := e.keepAlive(ctx, kept)
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
	r := newFenceRig(t)
	ctx := context.Background()
	e := r.engineTTL(t, "w", 8, holdingTTL)
	_, held, err := r.engineTTL(t, "o", 8, holdingTTL).TryAcquire(ctx, "x")
	require.NoError(t, err)
	require.True(t, held)
	_, _, err = r.newIntake(failingDispatch{e}).Accept(ctx, requests.Submission{Type: "fence.test", Queue: "q", UserID: "u", Keys: []string{"a", "x"}})
	require.NoError(t, err)
	later := r.acceptOn(t, "c")
	r.acceptOn(t, "a", "c")

	dctx, cancel := context.WithCancel(ctx)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_ = e.Drain(dctx, "a", "q") // hands its keys on once cancelled: U and M still wait for x
	}()
	require.Eventually(t, func() bool { return len(r.applied(t)) > 0 }, 20*time.Second, 10*time.Millisecond,
		"R is applied while U waits")
	cancel()
	<-drained
	got := r.applied(t)
	require.Len(t, got, 1)
	require.Equal(t, later, got[0].ID)
}
