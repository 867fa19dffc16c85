package keyed

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/tasks"
)

// A task whose request a drain already applied (it left the mailbox) returns
// after one ZSCORE: it takes no lease, so the key's fencing counter does not
// move, and it counts as a task that left its work to another drain. The
// control is a task whose request is still in the mailbox: it takes the
// lease and applies it.
func TestTaskOfAnAppliedRequestTakesNoLease(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	ctx := context.Background()
	e := r.engine(t, "w", 8)
	fences := func() string { return r.rdb.Get(ctx, fenceKey("k")).Val() }
	task := func(id string) error {
		tk, err := tasks.NewRequest("fence.test", "q", id, []string{"k"}, 0)
		require.NoError(t, err)
		return e.handleRequest(ctx, tk)
	}

	first := r.accept(t)
	require.NoError(t, e.Drain(ctx, "k", "q"))
	require.Len(t, r.applied(t), 1)
	before := fences()
	require.NotEmpty(t, before)
	require.NoError(t, task(first.String()))
	require.Equal(t, before, fences(), "no lease was taken")
	require.Equal(t, 1.0, testutil.ToFloat64(e.m.LeaseBusy.WithLabelValues("")))

	second := r.accept(t)
	require.NoError(t, task(second.String()))
	require.NotEqual(t, before, fences(), "control: a task whose request is still queued takes the lease")
	got := r.applied(t)
	require.Len(t, got, 2)
	require.Equal(t, second, got[1].ID)
}
