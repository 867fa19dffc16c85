package keyed

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/tasks"
)

// A task whose request a drain already applied (it left the mailbox) has
// nothing to do: with the mailbox empty, or the key's lease held by a drain
// that will apply what is left, it returns after the one acquire script and
// takes no lease, so the key's fencing counter does not move. Work left in
// the mailbox with no holder is still drained by such a task, and a task
// whose request is still queued drains as always.
func TestTaskOfAnAppliedRequestTakesNoLease(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	ctx := context.Background()
	// Its leases outlast the test: the key must stay held while held.
	e := r.engineTTL(t, "w", 8, holdingTTL)
	fences := func() string { return r.rdb.Get(ctx, fenceKey("k")).Val() }
	task := func(id string) {
		tk, err := tasks.NewRequest("fence.test", "q", id, []string{"k"}, 0)
		require.NoError(t, err)
		require.NoError(t, e.handleRequest(ctx, tk))
	}
	noops := func() float64 { return testutil.ToFloat64(e.m.AlreadyApplied.WithLabelValues("")) }
	waits := func() float64 { return testutil.ToFloat64(e.m.LeaseBusy.WithLabelValues("")) }

	first := r.accept(t).String()
	require.NoError(t, e.Drain(ctx, "k", "q"))
	require.Len(t, r.applied(t), 1)
	before := fences()
	task(first)
	require.Equal(t, before, fences(), "mailbox empty: no lease was taken")
	require.Equal(t, 1.0, noops())

	// Another request waits with no holder (its own task has not run):
	// the applied request's task drains it.
	second := r.accept(t)
	task(first)
	require.NotEqual(t, before, fences(), "work was stranded: the task took the lease")
	require.Equal(t, second, r.applied(t)[1].ID)
	require.Equal(t, 1.0, noops())

	// The key is held by another drain, which will apply what is left.
	third := r.accept(t)
	l, ok, err := e.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.True(t, ok)
	held := fences()
	task(first)
	require.Equal(t, held, fences(), "key held: no lease was taken")
	require.Equal(t, []float64{1, 1}, []float64{noops(), waits()}, "left to the holder: a lease wait")
	require.Len(t, r.applied(t), 2)
	require.NoError(t, e.newGroup("q", l).leave(ctx, 0))

	// Control: a task whose request is still queued drains.
	task(third.String())
	require.Len(t, r.applied(t), 3)
	require.Equal(t, third, r.applied(t)[2].ID)
}
