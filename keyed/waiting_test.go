package keyed

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/storage"
)

// pipelines is a go-redis hook on the pipelines a client sends, a drain's
// looks (each a peek and a try for the keys it waits for): it counts them,
// and once shut it holds each one until open closes, telling held of it.
type pipelines struct {
	n    atomic.Int64
	shut atomic.Bool
	held chan struct{}
	open chan struct{}
}

func (h *pipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		if h.shut.Load() {
			h.held <- struct{}{}
			<-h.open
		}
		return next(ctx, cmds)
	}
}

// watchedEngine is an engine of the rig, waiting quietly, whose Redis
// client sends its pipelines through looks, and its Postgres through pool.
func (r *fenceRig) watchedEngine(t *testing.T, pool *pgxpool.Pool, looks *pipelines) *Engine {
	rdb, err := storage.OpenRedis(context.Background(), config.Redis{URL: r.redisURL})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(looks)
	e := r.engineWith(t, Options{LeaseTTL: holdingTTL, BatchMax: 8, DrainSlice: time.Minute, Worker: "w"}, pool, rdb)
	e.opt.PlainWaiting = false
	return e
}

// registered reports whether a drain of e waits registered under key.
func registered(e *Engine, key string) bool {
	e.wakers.mu.Lock()
	defer e.wakers.mu.Unlock()
	return e.wakers.by[key] != nil
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
			looks := &pipelines{}
			e := r.watchedEngine(t, pool, looks)
			e.opt.PlainWaiting = plain
			acquisitions := func() int64 { return pool.Stat().AcquireCount() }
			// lookTwice waits until the drain has looked twice more: a look
			// sends two pipelines, a peek and a try for s.
			lookTwice := func() {
				seen := looks.n.Load()
				require.Eventually(t, func() bool { return looks.n.Load() >= seen+4 }, 30*time.Second, time.Millisecond)
			}

			first := r.acceptOn(t, "a", "s")
			holder := heldGroup(t, e, "s") // the other drain, on the same engine
			done := make(chan error, 1)
			go func() { done <- e.Drain(ctx, "a", "q") }()

			// The first look is a whole step: it marks the window processing
			// and runs an apply transaction, which finds s held. (Counting
			// pipelines alone would not do: on a Redis that has not loaded
			// the scripts yet, the first peek and try send two each.)
			require.Eventually(t, func() bool { return acquisitions() >= 2 }, 30*time.Second, time.Millisecond)
			lookTwice()
			before := acquisitions()
			require.Positive(t, before)
			for range 5 {
				lookTwice()
			}
			registered := registered(e, "a")
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
			require.NoError(t, holder.giveUp(ctx, []string{"s"}, map[string]string{"s": "a"}, "y", time.Minute))
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
	e := bareEngine(Options{})
	w := e.newWaiter("q")
	ch := parkOn(e, w, "a", "b")
	e.wakers.wake("b")
	e.wakers.wake("a") // woken already: does not block
	require.Len(t, ch, 1)
	<-ch

	other := e.newWaiter("q")
	otherCh := parkOn(e, other, "b") // b moved to another drain's group
	w.done()
	e.wakers.wake("a")
	require.Empty(t, ch, "a drain that is done waiting is not woken")
	e.wakers.wake("b")
	require.Len(t, otherCh, 1, "done leaves the other drain's registration")
	other.done()
	require.Empty(t, e.wakers.by, "nothing stays once no drain waits")

	e.opt.PlainWaiting = true
	g := &group{e: e, queue: "q", held: map[string]Lease{"a": {Key: "a", Token: 1}}, wait: e.newWaiting("q")}
	require.NoError(t, g.wait.receive(context.Background(), g, false))
	g.wait.pause(context.Background(), g, time.Microsecond)
	require.Empty(t, e.wakers.by, "a plain wait registers nowhere, so nobody wakes it")
}

// A drain that gives a key up kept for the holder of p (yield) wakes the
// drain of its process that waits holding p; a hand-off that keeps the key
// for no one wakes nobody.
func TestAYieldWakesTheDrainItKeepsTheKeyFor(t *testing.T) {
	_, e := quietEngine(t, 8)
	ctx := context.Background()
	waits := e.newWaiter("q")
	woken := parkOn(e, waits, "p")
	defer waits.done()

	require.NoError(t, heldGroup(t, e, "x").giveUp(ctx, []string{"x"}, nil, "h", 0))
	require.Empty(t, woken, "a hand-off wakes nobody")
	require.NoError(t, heldGroup(t, e, "y").giveUp(ctx, []string{"y"}, map[string]string{"y": "p"}, "y", time.Second))
	require.Len(t, woken, 1, "a yield for p wakes p's drain")
}

// newWaiter is a drain's quiet waiting, whatever the engine's options say.
func (e *Engine) newWaiter(queue string) *waiter {
	return &waiter{ws: &e.wakers, ch: make(chan struct{}, 1), queue: queue}
}

// quiet is g's quiet waiting: the tests of quiet waiting use engines that
// wait quietly.
func (g *group) quiet() *waiter { return g.wait.(*waiter) }

// bareEngine is an engine without stores, for the tests of the wakers'
// registry alone.
func bareEngine(opt Options) *Engine {
	return &Engine{opt: opt, wakers: wakers{by: map[string]*waiter{}}}
}

// parkOn parks w as the drain of a group of e holding keys, as a drain
// does between two looks. The leases are placeholders: the registry and
// take look at keys alone.
func parkOn(e *Engine, w *waiter, keys ...string) <-chan struct{} {
	g := &group{e: e, queue: "q", held: map[string]Lease{}}
	for _, k := range keys {
		g.held[k] = Lease{Key: k, Token: 1}
	}
	return w.park(g)
}

// take moves the whole group of a parked drain, and wakes it; it leaves
// alone a drain that is looking again (resumed), one of another queue, and
// one whose keys would not fit beside the taker's; a drain that is stopping
// takes nothing. Of two leases of one key the taker keeps the higher token.
func TestTakeMovesTheGroupOfAParkedDrainOnly(t *testing.T) {
	e := bareEngine(Options{BatchMax: 8}) // a group holds at most 80 keys
	into := &group{e: e, queue: "q", held: map[string]Lease{"s": {Key: "s", Token: 7}}}

	parked := e.newWaiter("q")
	woken := parkOn(e, parked, "a", "b")
	require.True(t, e.wakers.take("b", into))
	require.Equal(t, []string{"a", "b", "s"}, into.keys())
	require.Equal(t, Lease{Key: "a", Token: 1}, into.held["a"], "the lease moves, token and all")
	require.Empty(t, parked.g.held, "the drain taken over holds nothing, so it ends")
	require.Len(t, woken, 1, "and is woken to end at once")
	require.Empty(t, e.wakers.by, "nor can it be taken or woken again")
	require.False(t, e.wakers.take("a", into))

	looking := e.newWaiter("q")
	parkOn(e, looking, "c")
	looking.parked = false // as pause leaves it once it looks again
	require.False(t, e.wakers.take("c", into), "a drain that looks again keeps its group")
	require.Len(t, looking.g.held, 1)
	parkOn(e, looking, "c")
	require.True(t, e.wakers.take("c", into), "parked again, it is taken")

	other := e.newWaiter("q")
	other.park(&group{e: e, queue: "other", held: map[string]Lease{"d": {Key: "d"}}})
	require.False(t, e.wakers.take("d", into), "a drain of another queue")
	other.done()

	stale := e.newWaiter("q")
	parkOn(e, stale, "e", "s") // its lease of s lapsed; into holds s now
	require.True(t, e.wakers.take("e", into), "a group that lists a key the taker holds")
	require.Equal(t, Lease{Key: "s", Token: 7}, into.held["s"], "the live lease stays")
	delete(into.held, "e")

	stopping := e.newWaiter("q")
	parkOn(e, stopping, "f")
	into.wait = e.newWaiter("q")
	e.stopping.Store(true)
	left, took := into.wait.gather(context.Background(), into, map[string]string{"f": ""})
	require.False(t, took, "a drain that is stopping takes nothing")
	require.Contains(t, left, "f")
	e.stopping.Store(false)
	_, took = into.wait.gather(context.Background(), into, map[string]string{"f": ""})
	require.True(t, took)

	big := e.newWaiter("q")
	var keys []string
	for i := range e.maxGroupKeys() - requests.MaxKeys - len(into.held) + 1 {
		keys = append(keys, fmt.Sprintf("k%03d", i))
	}
	parkOn(e, big, keys...)
	require.False(t, e.wakers.take("k000", into), "a group that leaves no room for a request's keys")
	delete(big.g.held, "k000")
	require.True(t, e.wakers.take("k001", into), "one that does")
	require.Empty(t, e.wakers.by)
}

// Requests that share a key sorting after keys of their own (a cart of a
// long-tail option and a hot one) are each gathered by the drain of their
// own key, which waits for the shared one. Waiting quietly, the drain that
// holds the shared key takes over the groups of those that wait parked in
// its engine and applies all their requests in one transaction. The
// control, waiting plain, yields the shared key to the first of them, and
// the requests go one hand at a time.
func TestAHolderGathersTheDrainsThatWaitForItsKey(t *testing.T) {
	bothWaitings(t, func(t *testing.T, r *fenceRig, e *Engine, plain bool) {
		ctx := context.Background()
		ids := []uuid.UUID{r.acceptOn(t, "a", "s"), r.acceptOn(t, "b", "s"), r.acceptOn(t, "c", "s")}
		var waiting []*group
		for _, k := range []string{"a", "b", "c"} {
			g := heldGroup(t, e, k)
			e.newWaiter("q").park(g) // as its drain does once it found s held
			waiting = append(waiting, g)
		}
		holder := heldGroup(t, e, "s")

		progress, err := holder.step(ctx)
		require.NoError(t, err)
		if plain {
			require.True(t, progress)
			require.Empty(t, holder.held, "s is yielded to the drain of a")
			for _, id := range ids {
				require.True(t, r.open(t, id), "nothing is applied in that step")
			}
			return
		}
		require.True(t, progress)
		require.Equal(t, []string{"a", "b", "c", "s"}, holder.keys())
		for _, g := range waiting {
			require.Empty(t, g.held)
		}
		_, err = holder.step(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, r.transactions(t, ids...), "all three in one transaction")
		for _, id := range ids {
			require.False(t, r.open(t, id))
		}
	})
}

// A drain that looks again is not parked: a drain that wants its key does
// not take its group while the look runs, whatever the look then does with
// it (the look is held in a round trip to force the interleaving). Parked
// again, it is taken over, ends, and the taker applies its request. Run
// with -race, the tries to take race the drain's looks.
func TestADrainIsTakenOverOnlyWhileParked(t *testing.T) {
	r := newFenceRig(t)
	ctx := context.Background()
	looks := &pipelines{held: make(chan struct{}), open: make(chan struct{})}
	e := r.watchedEngine(t, r.pool, looks)
	id := r.acceptOn(t, "a", "s")
	holder := heldGroup(t, e, "s")
	done := make(chan error, 1)
	go func() { done <- e.Drain(ctx, "a", "q") }()

	require.Eventually(t, func() bool { return registered(e, "a") }, 30*time.Second, time.Millisecond,
		"the drain waits for s, holding a")
	looks.shut.Store(true)
	<-looks.held // the drain looks again, and a round trip of the look is held
	require.False(t, e.wakers.take("a", holder), "a drain that looks again keeps its group")
	looks.shut.Store(false)
	close(looks.open)

	require.Eventually(t, func() bool { return e.wakers.take("a", holder) }, 30*time.Second, 100*time.Microsecond)
	require.NoError(t, <-done)
	_, err := holder.step(ctx)
	require.NoError(t, err)
	require.False(t, r.open(t, id))
	require.Empty(t, e.wakers.by)
}

// Two drains of one engine that each hold the smallest key of a request
// the other meets give their keys to each other, one request at a time,
// for as long as requests come (a cart rush with long-tail options). Waiting
// quietly, a drain that would yield keys to a drain of its engine gives it
// its whole group instead: the leases move in the process, tokens and all,
// and the other applies both requests in one transaction. The control,
// waiting plain, yields through Redis, and the two trade keys.
func TestDrainsOfOneEngineMergeInsteadOfTradingKeys(t *testing.T) {
	bothWaitings(t, func(t *testing.T, r *fenceRig, e *Engine, plain bool) {
		ctx := context.Background()
		r1, r2 := r.acceptOn(t, "a", "b"), r.acceptOn(t, "b", "c")
		giver, taker := heldGroup(t, e, "a", "c"), heldGroup(t, e, "b")
		// Both are running drains, neither parked: registered as a drain's
		// receive does before each step.
		require.NoError(t, giver.wait.receive(ctx, giver, false))
		require.NoError(t, taker.wait.receive(ctx, taker, false))
		a := giver.held["a"]

		_, err := giver.step(ctx) // r1 waits for b; r2 is b's holder's to gather
		require.NoError(t, err)
		require.NoError(t, taker.wait.receive(ctx, taker, false))
		_, err = taker.step(ctx)
		require.NoError(t, err)
		if plain {
			require.Equal(t, []string{"a"}, giver.keys(), "c is yielded for b; a is kept for r1")
			require.NotContains(t, taker.held, "a")
			require.True(t, r.open(t, r1), "r1 waits for b, which its holder yields to a")
			return
		}
		require.Empty(t, giver.held)
		require.Equal(t, a, taker.held["a"], "the lease moves, token and all")
		require.Equal(t, 1, r.transactions(t, r1, r2), "both in one transaction")
	})
}

// quietEngine is an engine of a rig of its own that waits quietly, whatever
// HOLDFAST_TEST_SPEEDUPS says: the tests of quiet waiting itself.
func quietEngine(t *testing.T, batchMax int) (*fenceRig, *Engine) {
	r := newFenceRig(t)
	e := r.engineTTL(t, "w", batchMax, holdingTTL)
	e.opt.PlainWaiting = false
	return r, e
}

// bothWaitings runs f on a rig of its own with an engine waiting quietly,
// then with one waiting plain, the control.
func bothWaitings(t *testing.T, f func(t *testing.T, r *fenceRig, e *Engine, plain bool)) {
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("PlainWaiting=%t", plain), func(t *testing.T) {
			r := newFenceRig(t)
			e := r.engineTTL(t, "w", 8, holdingTTL)
			e.opt.PlainWaiting = plain
			f(t, r, e, plain)
		})
	}
}

// transactions counts the apply transactions that applied ids (the rig's
// applied table records each one's).
func (r *fenceRig) transactions(t *testing.T, ids ...uuid.UUID) int {
	var n int
	require.NoError(t, r.pool.QueryRow(context.Background(), `SELECT count(DISTINCT tx) FROM applied WHERE request_id = ANY($1)`,
		ids).Scan(&n))
	return n
}

// A drain closes its inbox as it ends (receive, closing): a group given to
// it after that is refused and stays with its drain, which then yields
// as before. The control builds the end without closing: the gift lands in
// an inbox nobody reads, and its keys stay leased to nobody until their
// leases lapse, with every request on them waiting.
func TestAGroupIsGivenOnlyToADrainThatGoesOn(t *testing.T) {
	for _, closing := range []bool{true, false} {
		t.Run(fmt.Sprintf("closing=%t", closing), func(t *testing.T) {
			r, e := quietEngine(t, 8)
			ctx := context.Background()
			r.acceptOn(t, "a", "b")
			ending, giver := heldGroup(t, e, "a"), heldGroup(t, e, "b")
			ending.quiet().track(ending)
			to := e.wakers.holderFor(giver.quiet(), []string{"a"}, e.maxGroupKeys()) // the request's smallest key, which the giver failed to get
			require.Same(t, ending.quiet(), to, "the giver finds a's drain")

			// a's drain lets a go and ends, as the giver gives.
			require.NoError(t, ending.giveUp(ctx, []string{"a"}, nil, "h", time.Hour))
			if closing {
				require.NoError(t, ending.quiet().receive(ctx, ending, true))
			}
			ending.quiet().done()
			gave := to.give(slices.Collect(maps.Values(giver.held)))
			if !closing {
				require.True(t, gave, "the unguarded end takes the gift")
				require.Equal(t, int64(1), r.rdb.Exists(ctx, leaseKey("b")).Val(), "b stays leased to nobody")
				return
			}
			require.False(t, gave, "a drain that ended takes nothing")
			require.Contains(t, giver.held, "b", "b stays with its drain")
		})
	}
}

// Groups given to a drain as it receives and then ends all land somewhere:
// in its group, or back with their givers, refused. Run with -race, the
// gifts race the receiving.
func TestGiftsRacingTheEndLoseNoLease(t *testing.T) {
	e := bareEngine(Options{BatchMax: 8}) // a group holds at most 80 keys
	g := &group{e: e, queue: "q", held: map[string]Lease{}, wait: e.newWaiter("q")}
	var wg sync.WaitGroup
	refused := make([][]Lease, 10)
	for i := range refused {
		ls := make([]Lease, 5)
		for j := range ls {
			ls[j] = Lease{Key: fmt.Sprintf("k%d-%d", i, j), Token: 1}
		}
		wg.Go(func() {
			if !g.quiet().give(ls) {
				refused[i] = ls
			}
		})
	}
	for range 3 {
		require.NoError(t, g.quiet().receive(context.Background(), g, false))
	}
	require.NoError(t, g.quiet().receive(context.Background(), g, true))
	wg.Wait()
	n := len(g.held)
	for _, ls := range refused {
		n += len(ls)
		for _, l := range ls {
			require.NotContains(t, g.held, l.Key)
		}
	}
	require.Equal(t, 50, n, "every lease is in the group or refused")
}

// A gift that would take a group past maxGroupKeys (the receiver grew
// after the giver read its registration) is handed on at once: its leases
// are released, not kept above the bound nor left leased to nobody.
func TestAGiftOverTheBoundIsHandedOn(t *testing.T) {
	r, e := quietEngine(t, 1) // a group holds at most 66 keys
	ctx := context.Background()
	var own, gift []string
	for i := range e.maxGroupKeys() - 2 {
		own = append(own, fmt.Sprintf("own%03d", i))
	}
	for i := range 5 {
		gift = append(gift, fmt.Sprintf("gift%d", i))
	}
	g, giver := heldGroup(t, e, own...), heldGroup(t, e, gift...)
	require.True(t, g.quiet().give(giver.leases()))

	require.NoError(t, g.quiet().receive(ctx, g, false))
	require.Equal(t, own, g.keys(), "the group keeps its own keys and no more")
	for _, k := range gift {
		require.Zero(t, r.rdb.Exists(ctx, leaseKey(k)).Val(), "%s is released", k)
	}
}

// A take or a gift that brings a group a second lease of a key it holds
// keeps the higher token and releases the other in Redis: a no-op when
// that one lapsed, as it normally has, and the live lease going to a new
// drain when a Redis that lost its fences handed out the lower token last.
// Dropped without a release (the control, checked by hand), that live
// lease would stay leased to nobody until it lapsed.
func TestTwoLeasesOfAKeyLeaveNoneUnused(t *testing.T) {
	for _, liveIsLower := range []bool{false, true} {
		t.Run(fmt.Sprintf("liveIsLower=%t", liveIsLower), func(t *testing.T) {
			r, e := quietEngine(t, 8)
			ctx := context.Background()
			live := holding(t, e, "s")
			into, parked := heldGroup(t, e, "x"), Lease{Key: "s", Token: live.Token - 1}
			into.held["s"] = live
			if liveIsLower {
				into.held["s"], parked = Lease{Key: "s", Token: live.Token + 1}, live
			}
			e.newWaiter("q").park(&group{e: e, queue: "q", held: map[string]Lease{"s": parked}})

			require.True(t, e.wakers.take("s", into))
			require.NoError(t, into.quiet().receive(ctx, into, false))
			held, err := r.rdb.Get(ctx, leaseKey("s")).Result()
			if !liveIsLower {
				require.NoError(t, err)
				require.Equal(t, strconv.FormatInt(live.Token, 10), held, "the live lease stays in use")
				return
			}
			require.ErrorIs(t, err, redis.Nil, "the live lease is released, not left to lapse")
			require.Equal(t, live.Token+1, into.held["s"].Token, "the next peek finds the kept one lost")
		})
	}
}

// A group given to a drain while its transaction runs waits in its inbox
// until the next step; the transaction's keepAlive extends those leases
// with the drain's own, so a slow transaction does not let them lapse
// (the drain's next peek would find them lost and end it). Extending only
// the leases the transaction started with fails this test: checked.
func TestAGiftOutlivesASlowTransaction(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	const ttl = 600 * time.Millisecond
	stall := &pgStall{prefix: "INSERT INTO applied"} // inside the applier
	pool := r.stallingPool(t, stall)
	e := r.engineOn(t, "w", 8, ttl, pool, r.rdb)
	e.opt.PlainWaiting = false
	ctx := context.Background()
	id := r.acceptOn(t, "r")
	g, gift := heldGroup(t, e, "r"), holding(t, e, "x")
	stall.set(func() {
		require.True(t, g.quiet().give([]Lease{gift}))
		// The leases expire on Redis's clock, so only real time can outlast
		// them; the gift lives through it only if keepAlive extends it.
		time.Sleep(3 * ttl)
	})

	_, err := g.step(ctx)
	require.NoError(t, err)
	require.False(t, r.open(t, id))
	require.NoError(t, g.quiet().receive(ctx, g, false))
	require.Equal(t, gift, g.held["x"])
	require.Equal(t, strconv.FormatInt(gift.Token, 10), r.rdb.Get(ctx, leaseKey("x")).Val(), "the gift's lease is alive")
}
