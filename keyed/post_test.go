package keyed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/metrics"
	"github.com/holdfast/holdfast/requests"
)

// acceptConcurrently submits n requests on key k at once through an intake
// on the rig's Redis client, and returns their ids.
func acceptConcurrently(t *testing.T, r *fenceRig, n int) []string {
	return acceptConcurrentlyWith(t, r, n, Options{})
}

// acceptConcurrentlyWith is acceptConcurrently through an engine with opt.
func acceptConcurrentlyWith(t *testing.T, r *fenceRig, n int, opt Options) []string {
	t.Helper()
	e := New(r.pool, r.rdb, nil, slog.Default(), metrics.NewPipeline(prometheus.NewRegistry()), opt)
	t.Cleanup(func() { _ = e.Close() })
	in := requests.NewIntake(requests.NewStore(r.pool), e, slog.Default())
	ids := make([]string, n)
	errs := testenv.AtOnce(n, func(i int) error {
		req, _, err := in.Accept(context.Background(), requests.Submission{
			Type: "fence.test", Queue: "q", UserID: "u", Keys: []string{"k"}})
		if err == nil {
			ids[i] = req.ID.String()
		}
		return err
	})
	for i, err := range errs {
		require.NoError(t, err, "request %d", i)
	}
	return ids
}

// sum adds up counts.
func sum(counts []int) int {
	total := 0
	for _, n := range counts {
		total += n
	}
	return total
}

// Intake's group commit puts each stored batch in its mailboxes in one
// round trip, instead of one per request: 60 concurrent submissions take
// fewer posting pipelines than requests, some carrying several requests,
// each reading its key's lease once, and every request ends up in the
// mailbox, in seq order, with its task.
func TestGroupCommitPostsABatchInOneRoundTrip(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	sent := testenv.WatchRedis(r.rdb)
	const n = 60
	ids := acceptConcurrently(t, r, n)

	posts := sent.Pipelines("zadd")
	t.Logf("%d posting pipelines for %d requests: %v", len(posts), n, posts)
	require.Equal(t, n, sum(posts), "each request posted once")
	require.Less(t, len(posts), n)
	require.Greater(t, slices.Max(posts), 1)
	reads := sent.Pipelines("exists")
	require.Len(t, reads, len(posts), "the key's lease read once per post")
	require.Equal(t, len(posts), sum(reads), "one key: one read per post, whatever the batch")
	ctx := context.Background()
	mbox := r.rdb.ZRange(ctx, mboxKey("k"), 0, -1).Val()
	require.ElementsMatch(t, ids, mbox)
	var inSeq []string
	rows, err := r.pool.Query(ctx, `SELECT id::text FROM requests ORDER BY seq`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		inSeq = append(inSeq, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, inSeq, mbox, "the mailbox is in seq order")
	pending, err := asynq.NewInspectorFromRedisClient(r.rdb).ListPendingTasks("q", asynq.PageSize(n+1))
	require.NoError(t, err)
	require.Len(t, pending, n, "one task per request")
}

// The Asynq enqueues of concurrent submissions reach Redis together, several
// enqueue scripts a pipeline (storage.BatchScripts); with EnqueueEach
// (BATCH_ENQUEUE=false) each goes by itself: the switch turns it off.
func TestEnqueueEachTurnsBatchedEnqueuesOff(t *testing.T) {
	t.Parallel()
	for _, each := range []bool{false, true} {
		t.Run(fmt.Sprintf("EnqueueEach=%t", each), func(t *testing.T) {
			t.Parallel()
			r := newFenceRig(t)
			sent := testenv.WatchRedis(r.rdb)
			const n = 60
			acceptConcurrentlyWith(t, r, n, Options{EnqueueEach: each})
			batched := sent.Pipelines("evalsha", "eval")
			t.Logf("enqueue scripts in pipelines: %v; alone: %d", batched, sent.Alone("evalsha", "eval"))
			if each {
				require.Empty(t, batched, "no enqueue goes in a pipeline")
				require.GreaterOrEqual(t, sent.Alone("evalsha", "eval"), n, "each enqueue is a round trip")
			} else {
				require.Equal(t, n, sum(batched), "every enqueue goes in a pipeline")
				require.Greater(t, slices.Max(batched), 1, "some pipelines carry several")
			}
		})
	}
}

// When posting a batch fails, each of its requests posts itself: nothing is
// lost and nothing is marked undispatched.
func TestFailedBatchPostFallsBackToEachRequest(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	sent := testenv.WatchRedis(r.rdb)
	var failed atomic.Bool // the first post fails, as in a Redis blip
	r.rdb.AddHook(testenv.OnPipeline(func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
		if cmds[0].Name() != "zadd" || failed.Swap(true) {
			return next(ctx, cmds)
		}
		err := &net.OpError{Op: "write", Net: "tcp", Err: errors.New("injected")}
		for _, c := range cmds {
			c.SetErr(err)
		}
		return err
	}))
	const n = 40
	ids := acceptConcurrently(t, r, n)

	ctx := context.Background()
	require.ElementsMatch(t, ids, r.rdb.ZRange(ctx, mboxKey("k"), 0, -1).Val())
	var undispatched int
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT count(*) FROM requests WHERE undispatched`).Scan(&undispatched))
	require.Zero(t, undispatched)
	require.True(t, failed.Load())
	require.Greater(t, sum(sent.Pipelines("zadd")), n, "the failed batch was posted again, request by request")
}

// trackBeforePost is a Tracker and a Dispatcher in one: it records the
// requests intake tracks, and for each request posted whether it was
// tracked by then. The API's Notifier must know of a request before a
// worker can announce it, which a drain already holding the key can do the
// moment the request is in its mailbox.
type trackBeforePost struct {
	*Engine
	mu          sync.Mutex
	tracked     map[uuid.UUID]string
	postedFirst []uuid.UUID // posted before they were tracked
}

func (d *trackBeforePost) Track(id uuid.UUID, owner string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tracked[id] = owner
}

func (d *trackBeforePost) Post(ctx context.Context, rs []*requests.Request) ([]requests.Posting, error) {
	d.mu.Lock()
	for _, r := range rs {
		if _, ok := d.tracked[r.ID]; !ok {
			d.postedFirst = append(d.postedFirst, r.ID)
		}
	}
	d.mu.Unlock()
	return d.Engine.Post(ctx, rs)
}

// Intake tracks a request before posting it to its mailboxes, so the
// API's Notifier remembers an announcement that comes before Accept
// returns: the client's long poll then reads the outcome at once instead
// of waiting for an announcement that has passed (which cost it a second,
// the poll's fallback). Both paths: the group commit's batch post and an
// idempotent submission's own.
func TestIntakeTracksARequestBeforeItsPost(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	ctx := context.Background()
	d := &trackBeforePost{Engine: r.engine(t, "w", 8), tracked: map[uuid.UUID]string{}}
	in := r.newIntake(d)
	in.Tracker = d

	for _, key := range []string{"", "idem-1"} {
		req, created, err := in.Accept(ctx, requests.Submission{Type: "fence.test", Queue: "q", UserID: "u",
			Keys: []string{"k"}, Route: "test", IdempotencyKey: key})
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, "u", d.tracked[req.ID], "key %q: tracked for its owner", key)
	}
	require.Empty(t, d.postedFirst, "every request was tracked before it was posted")
}

// A task whose key a drain holds, in its own process or another, asks
// Redis for the lease once, finds it held and leaves the request to the
// holder, which keeps the key.
func TestTaskOfAHeldKeyLeavesItsRequestToTheHolder(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	ctx := context.Background()
	e := New(r.pool, r.rdb, nil, slog.Default(), metrics.NewPipeline(prometheus.NewRegistry()),
		Options{LeaseTTL: holdingTTL})
	t.Cleanup(func() { _ = e.Close() })
	require.NoError(t, r.rdb.ZAdd(ctx, mboxKey("k"), redis.Z{Score: 1, Member: "r1"}).Err())
	l, ok, _, err := e.acquireWork(ctx, "k")
	require.NoError(t, err)
	require.True(t, ok)
	g := e.newGroup("q", l) // a drain of this process holds k

	sent := testenv.WatchRedis(r.rdb)
	require.NoError(t, e.Drain(ctx, "k", "q"))
	require.Equal(t, 1, sent.Alone("evalsha")+sent.Alone("eval"), "one lease attempt")
	require.Equal(t, l.Token, g.held["k"].Token, "the holder keeps the key")
	require.Equal(t, strconv.FormatInt(l.Token, 10), r.rdb.Get(ctx, leaseKey("k")).Val(), "the lease is still the holder's")
	require.Equal(t, int64(1), r.rdb.ZCard(ctx, mboxKey("k")).Val(), "the request is left to the holder")
}

// When the caller's time runs out while its write's INSERT waits (a slow
// Postgres), the caller is told at its deadline that the write's storing is
// in doubt (requests.Unsettled, with its id) instead of being held past it;
// its batch goes on, stores the write and puts it in its mailbox, where a
// drain of its key applies it (the reconciler enqueues one for a key with
// open requests and no holder), not marked undispatched: its order among
// the key's requests is its seq's. (Before one deadline a request, the
// caller waited out the batch's own bound and was answered 202.)
func TestAWriteWhoseCallerTimedOutWhileStoredIsPostedAllTheSame(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	bg := context.Background()
	in := r.newIntake(r.engine(t, "intake", 1))
	in.CommitEach = false       // the group commit's bound, not the caller's, is the INSERT's
	tx, err := r.pool.Begin(bg) // Postgres is slow: the INSERT waits for this lock
	require.NoError(t, err)
	_, err = tx.Exec(bg, `LOCK TABLE requests IN SHARE MODE`)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	go func() { <-ctx.Done(); _ = tx.Rollback(bg) }() // until the caller's time is up

	_, _, err = in.Accept(ctx, requests.Submission{Type: "fence.test", Queue: "q", UserID: "u", Keys: []string{"k"}})
	var unsettled *requests.Unsettled
	require.ErrorAs(t, err, &unsettled, "answered at its deadline: stored or not, not known yet")
	require.Eventually(t, func() bool { return r.rdb.ZCard(bg, mboxKey("k")).Val() == 1 }, 30*time.Second, 10*time.Millisecond,
		"stored and posted by its batch")
	var undispatched bool
	require.NoError(t, r.pool.QueryRow(bg, `SELECT undispatched FROM requests WHERE id = $1`, unsettled.ID).Scan(&undispatched))
	require.False(t, undispatched)
}
