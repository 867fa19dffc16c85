package keyed

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/storage"
)

// pipelines is a go-redis hook that counts the pipelines a client sends: a
// drain's looks, each a peek and a try for the keys it waits for.
type pipelines struct{ n atomic.Int64 }

func (h *pipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// A drain whose request waits for a key another drain holds looks again
// every few milliseconds. Waiting quietly, a look that sees what the last
// idle step saw only tries the key again: once its first look is done, the
// drain does not touch Postgres however many looks it makes, where an idle
// step would lock the rows of the requests it waits for; a request that
// joins its windows makes the next look a whole step again. The control,
// waiting plain, runs a whole step at every look. Either way the drain
// takes the key once the holder yields it, and applies both requests.
func TestAQuietDrainWaitsWithoutPostgres(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("PlainWaiting=%t", plain), func(t *testing.T) {
			r := newFenceRig(t)
			ctx := context.Background()
			pool, err := storage.OpenPostgres(ctx, r.pgURL, 4)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			rdb, err := storage.OpenRedis(ctx, config.Redis{URL: r.redisURL})
			require.NoError(t, err)
			t.Cleanup(func() { _ = rdb.Close() })
			looks := &pipelines{}
			rdb.AddHook(looks)
			e := r.engineWith(t, Options{LeaseTTL: holdingTTL, BatchMax: 8, DrainSlice: time.Minute, Worker: "w"}, pool, rdb)
			e.opt.PlainWaiting = plain
			acquisitions := func() int64 { return pool.Stat().AcquireCount() }
			// lookTwice waits until the drain has looked twice more: a look
			// sends two pipelines, a peek and a try for s.
			lookTwice := func() {
				seen := looks.n.Load()
				require.Eventually(t, func() bool { return looks.n.Load() >= seen+4 }, 30*time.Second, time.Millisecond)
			}

			first := r.acceptOn(t, "a", "s")
			s, ok, err := e.TryAcquire(ctx, "s") // the other drain, on the same engine
			require.NoError(t, err)
			require.True(t, ok)
			done := make(chan error, 1)
			go func() { done <- e.Drain(ctx, "a", "q") }()

			lookTwice() // the first look read the request from Postgres and found s held
			before := acquisitions()
			require.Positive(t, before)
			for range 5 {
				lookTwice()
			}
			e.wakers.mu.Lock()
			registered := e.wakers.by["a"] != nil
			e.wakers.mu.Unlock()
			if plain {
				require.Greater(t, acquisitions(), before, "every look is a whole step")
				require.False(t, registered)
			} else {
				require.Equal(t, before, acquisitions(), "the looks after the first use Redis alone")
				require.True(t, registered, "the waiting drain can be woken under the key it holds")
			}

			second := r.acceptOn(t, "a")
			lookTwice()
			lookTwice()
			require.Greater(t, acquisitions(), before, "a changed window makes a whole step")
			require.True(t, r.open(t, first))
			require.True(t, r.open(t, second), "behind the first on a")

			// The holder yields s to the drain of a, as a drain does that
			// makes way for a request whose smallest key is a.
			require.NoError(t, e.newGroup("q", s).giveUp(ctx, []string{"s"}, map[string]string{"s": "a"}, "y", time.Minute))
			require.NoError(t, <-done)
			require.False(t, r.open(t, first))
			require.False(t, r.open(t, second))
		})
	}
}

// A drain that yields a key for another wakes it when that drain waits in
// the same process, under any key its group held when it began to wait;
// a drain that made progress, or waits plain, is not woken.
func TestWakersWakeTheDrainThatWaitsHoldingTheKey(t *testing.T) {
	e := &Engine{}
	w := e.newWaiter()
	ch := w.wait([]string{"a", "b"})
	e.wakers.wake("b")
	e.wakers.wake("a") // woken already: does not block
	require.Len(t, ch, 1)
	<-ch

	other := e.newWaiter()
	otherCh := other.wait([]string{"b"}) // b moved to another drain's group
	w.done()
	e.wakers.wake("a")
	require.Empty(t, ch, "a drain that is done waiting is not woken")
	e.wakers.wake("b")
	require.Len(t, otherCh, 1, "done leaves the other drain's registration")
	other.done()
	require.Empty(t, e.wakers.by, "nothing stays once no drain waits")

	e.opt.PlainWaiting = true
	require.Nil(t, e.newWaiter().wait([]string{"a"}), "a plain wait has no wake")
	require.Empty(t, e.wakers.by)
}

// A drain that gives a key up kept for the holder of p (yield) wakes the
// drain of its process that waits holding p; a hand-off that keeps the key
// for no one wakes nobody.
func TestAYieldWakesTheDrainItKeepsTheKeyFor(t *testing.T) {
	r := newFenceRig(t)
	e := r.engineTTL(t, "w", 8, holdingTTL)
	e.opt.PlainWaiting = false
	ctx := context.Background()
	waits := e.newWaiter()
	woken := waits.wait([]string{"p"})
	defer waits.done()

	require.NoError(t, heldGroup(t, e, "x").giveUp(ctx, []string{"x"}, nil, "h", 0))
	require.Empty(t, woken, "a hand-off wakes nobody")
	require.NoError(t, heldGroup(t, e, "y").giveUp(ctx, []string{"y"}, map[string]string{"y": "p"}, "y", time.Second))
	require.Len(t, woken, 1, "a yield for p wakes p's drain")
}
