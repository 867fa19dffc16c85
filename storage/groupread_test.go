package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gatedReads is a read function whose first read waits until the test
// closes first, and which answers each key with the read's number.
type gatedReads struct {
	mu    sync.Mutex
	first chan struct{}
	reads [][]string
}

func (r *gatedReads) read(_ context.Context, keys []string) (map[string]string, error) {
	r.mu.Lock()
	r.reads = append(r.reads, keys)
	n := len(r.reads)
	r.mu.Unlock()
	if n == 1 {
		<-r.first
	}
	vals := map[string]string{}
	for _, k := range keys {
		vals[k] = fmt.Sprintf("%s@%d", k, n)
	}
	return vals, nil
}

func (g *GroupRead[K, V]) queued() int { return g.turns.waiting() }

func waitQueued[K comparable, V any](t *testing.T, g *GroupRead[K, V], n int) {
	t.Helper()
	require.Eventually(t, func() bool { return g.queued() == n }, 10*time.Second, time.Millisecond)
}

func (r *gatedReads) waitReads(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.reads) == n }, 10*time.Second, time.Millisecond)
}

// Keys asked for while a read runs wait for the next read, which takes
// them together, and none is answered from a read that began before it
// asked: the read in flight when a caller comes may predate a write the
// caller has seen finish.
func TestGroupReadGathersAndNeverAnswersFromAnEarlierRead(t *testing.T) {
	r := &gatedReads{first: make(chan struct{})}
	g := NewGroupRead(r.read, 256, 5*time.Second)
	ctx := context.Background()

	first := make(chan string)
	go func() { v, _ := g.Get(ctx, "a"); first <- v }()
	r.waitReads(t, 1)

	// Read 1 is in flight (for "a"); ten callers come, one of them for
	// "a" again.
	var wg sync.WaitGroup
	got := make([]string, 10)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("k", i)
			if i == 0 {
				key = "a"
			}
			got[i], _ = g.Get(ctx, key)
		}()
	}
	waitQueued(t, g, 10)
	close(r.first)
	require.Equal(t, "a@1", <-first)
	wg.Wait()
	require.Equal(t, "a@2", got[0], "a caller that came during read 1 is answered by read 2")
	for i := 1; i < 10; i++ {
		require.Equal(t, fmt.Sprintf("k%d@2", i), got[i])
	}
	require.Len(t, r.reads, 2, "the ten waited for one read")
	require.Len(t, r.reads[1], 10)
}

// At most max keys a read: the rest wait for the next.
func TestGroupReadBoundsARead(t *testing.T) {
	r := &gatedReads{first: make(chan struct{})}
	g := NewGroupRead(r.read, 4, 5*time.Second)
	ctx := context.Background()
	go func() { _, _ = g.Get(ctx, "lead") }()
	r.waitReads(t, 1)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = g.Get(ctx, fmt.Sprint(i)) }()
	}
	waitQueued(t, g, 10)
	close(r.first)
	wg.Wait()
	sizes := []int{}
	for _, keys := range r.reads[1:] {
		sizes = append(sizes, len(keys))
	}
	require.Equal(t, []int{4, 4, 2}, sizes)
}

// Many callers at once, each for its own key: every one gets its own
// value, in fewer reads than callers.
func TestGroupReadUnderARace(t *testing.T) {
	var reads atomic.Int64
	g := NewGroupRead(func(_ context.Context, keys []int) (map[int]int, error) {
		reads.Add(1)
		time.Sleep(time.Millisecond) // a round trip
		vals := map[int]int{}
		for _, k := range keys {
			vals[k] = k * k
		}
		return vals, nil
	}, 256, 5*time.Second)
	var wg sync.WaitGroup
	for i := range 500 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := g.Get(context.Background(), i)
			require.NoError(t, err)
			require.Equal(t, i*i, v)
		}()
	}
	wg.Wait()
	require.Less(t, reads.Load(), int64(500))
	require.False(t, g.turns.busy, "the last leader gave the lead up")
}

// A failed read fails every caller it was for; the next read is tried anew.
func TestGroupReadError(t *testing.T) {
	boom := errors.New("boom")
	var fail atomic.Bool
	fail.Store(true)
	g := NewGroupRead(func(_ context.Context, keys []string) (map[string]string, error) {
		if fail.Load() {
			return nil, boom
		}
		return map[string]string{"x": "ok"}, nil
	}, 8, time.Second)
	_, err := g.Get(context.Background(), "x")
	require.ErrorIs(t, err, boom)
	fail.Store(false)
	v, err := g.Get(context.Background(), "x")
	require.NoError(t, err)
	require.Equal(t, "ok", v)
	v, err = g.Get(context.Background(), "absent")
	require.NoError(t, err)
	require.Empty(t, v, "a key the read did not find is the zero value")
}

// A read that fails answers every caller waiting meanwhile at once, rather
// than each after a read of its own fails in turn; a read that panics fails
// its callers and leaves the group usable.
func TestGroupReadFailureReachesEveryWaiter(t *testing.T) {
	boom := errors.New("store down")
	gate := make(chan struct{})
	var reads atomic.Int64
	var panics atomic.Bool
	g := NewGroupRead(func(_ context.Context, keys []string) (map[string]string, error) {
		if reads.Add(1) == 1 {
			<-gate
			return nil, boom
		}
		if panics.Load() {
			panic("a bug in the read")
		}
		return map[string]string{keys[0]: "ok"}, nil
	}, 0, time.Second) // max below 1 reads one key at a time
	errs := make(chan error, 11)
	go func() { _, err := g.Get(context.Background(), "lead"); errs <- err }()
	require.Eventually(t, func() bool { return reads.Load() == 1 }, 10*time.Second, time.Millisecond)
	for i := range 10 {
		go func() { _, err := g.Get(context.Background(), fmt.Sprint(i)); errs <- err }()
	}
	waitQueued(t, g, 10)
	close(gate)
	for range 11 {
		require.ErrorIs(t, <-errs, boom)
	}
	require.EqualValues(t, 1, reads.Load(), "one failed read answered all eleven")

	panics.Store(true)
	_, err := g.Get(context.Background(), "x")
	require.ErrorContains(t, err, "panic")
	panics.Store(false)
	v, err := g.Get(context.Background(), "x")
	require.NoError(t, err)
	require.Equal(t, "ok", v, "the lead was handed on after the panic")
}
