package baseline

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A mark made before its poll is read at once, and again by a poll asked
// again; a poll that gives up on a request never announced leaves nothing
// behind; two polls wait on one request and, when one gives up
// first, the other is still woken by the mark (the control: the first to
// give up removing the mark under the other would leave it to time out);
// a poll returns when its context ends.
func TestDoneMarks(t *testing.T) {
	t.Parallel()
	d := &doneMarks{m: map[string]*doneMark{}}
	ctx := context.Background()

	d.mark("a")
	d.mark("a") // Asynq may deliver a task twice
	require.True(t, d.await(ctx, "a", time.Minute))
	require.True(t, d.await(ctx, "a", time.Minute), "asked again")
	require.Equal(t, 1, d.size())

	require.False(t, d.await(ctx, "never", time.Millisecond))
	require.Equal(t, 1, d.size(), "only a is kept")

	long := make(chan bool)
	go func() { long <- d.await(ctx, "b", time.Minute) }()
	require.Eventually(t, func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.m["b"] != nil && d.m["b"].waiters == 1
	}, 5*time.Second, time.Millisecond)
	require.False(t, d.await(ctx, "b", 10*time.Millisecond))
	d.mark("b")
	select {
	case ok := <-long:
		require.True(t, ok)
	case <-time.After(30 * time.Second):
		t.Fatal("the remaining poll was not woken by the mark")
	}
	require.Equal(t, 2, d.size())

	cctx, cancel := context.WithCancel(ctx)
	ended := make(chan bool)
	go func() { ended <- d.await(cctx, "c", time.Hour) }()
	cancel()
	select {
	case ok := <-ended:
		require.False(t, ok)
	case <-time.After(30 * time.Second):
		t.Fatal("a poll outlived its context")
	}
	require.Equal(t, 2, d.size(), "c was never announced")
}
