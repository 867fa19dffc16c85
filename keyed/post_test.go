package keyed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
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
	require.Equal(t, inSeq, mbox, "the mailbox is in acceptance order")
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

// announceOnPost posts through the real engine and then announces the
// posted requests done before Post returns, as a drain already holding the
// key can do before intake has handed the request back: it publishes on
// the done channel and waits until the notifier has delivered it.
type announceOnPost struct {
	*Engine
	n *requests.Notifier
}

func (d announceOnPost) Post(ctx context.Context, rs []*requests.Request) ([]requests.Posting, error) {
	postings, err := d.Engine.Post(ctx, rs)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	done := make([]*requests.Request, len(rs))
	delivered := make([]<-chan []byte, len(rs))
	for i, r := range rs {
		c := *r
		c.Status, c.CompletedAt = domain.StatusSucceeded, &now
		done[i] = &c
		ch, cancel := d.n.Wait(r.ID)
		defer cancel()
		delivered[i] = ch
	}
	msg, err := requests.DoneMessage(done)
	if err != nil {
		return nil, err
	}
	if err := d.rdb.Publish(ctx, requests.DoneChannel, msg).Err(); err != nil {
		return nil, err
	}
	for _, ch := range delivered {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			return nil, errors.New("announcement not delivered")
		}
	}
	return postings, nil
}

// Intake tells the notifier of a request before posting it to its mailboxes,
// so an announcement that comes before Accept returns is remembered: the
// client's long poll then reads the outcome at once instead of waiting for
// an announcement that has passed (which cost it a second, the poll's
// fallback). Both paths: the group commit's batch post and an idempotent
// submission's own.
func TestIntakeTracksARequestBeforeItsPost(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := requests.NewNotifier(r.rdb, slog.Default())
	go n.Run(ctx)
	require.Eventually(t, func() bool {
		subs, err := r.rdb.PubSubNumSub(ctx, requests.DoneChannel).Result()
		return err == nil && subs[requests.DoneChannel] > 0
	}, 5*time.Second, 10*time.Millisecond)
	in := r.newIntake(announceOnPost{r.engine(t, "w", 8), n})
	in.Tracker = n

	for _, key := range []string{"", "idem-1"} {
		req, created, err := in.Accept(ctx, requests.Submission{Type: "fence.test", Queue: "q", UserID: "u",
			Keys: []string{"k"}, Route: "test", IdempotencyKey: key})
		require.NoError(t, err)
		require.True(t, created)
		got, ok := n.Local(req.ID, func(string) bool { return true })
		require.True(t, ok, "key %q: tracked", key)
		require.Equal(t, "u", got.Owner)
		require.True(t, got.Announced, "key %q: the announcement made during the post is remembered", key)
	}
}

// A task whose key a drain of its own process holds returns without a
// round trip (Drain's local shortcut); with AlwaysAcquire (LOCAL_SHORTCUT=
// false) it asks Redis for the lease and finds it held. Either way it
// leaves the request to the holder.
func TestAlwaysAcquireTurnsTheLocalShortcutOff(t *testing.T) {
	t.Parallel()
	for _, always := range []bool{false, true} {
		t.Run(fmt.Sprintf("AlwaysAcquire=%t", always), func(t *testing.T) {
			t.Parallel()
			r := newFenceRig(t)
			ctx := context.Background()
			e := New(r.pool, r.rdb, nil, slog.Default(), metrics.NewPipeline(prometheus.NewRegistry()),
				Options{LeaseTTL: holdingTTL, AlwaysAcquire: always})
			t.Cleanup(func() { _ = e.Close() })
			require.NoError(t, r.rdb.ZAdd(ctx, mboxKey("k"), redis.Z{Score: 1, Member: "r1"}).Err())
			l, ok, _, err := e.acquireWork(ctx, "k")
			require.NoError(t, err)
			require.True(t, ok)
			g := e.newGroup("q", l) // a drain of this process holds k
			defer g.leave()

			sent := testenv.WatchRedis(r.rdb)
			require.NoError(t, e.Drain(ctx, "k", "q"))
			if always {
				require.Equal(t, 1, sent.Alone("evalsha")+sent.Alone("eval"), "one lease attempt")
			} else {
				require.Zero(t, sent.Alone()+len(sent.Pipelines()), "no round trip")
			}
			require.Equal(t, l.Token, g.held["k"].Token, "the holder keeps the key")
			require.Equal(t, int64(1), r.rdb.ZCard(ctx, mboxKey("k")).Val(), "the request is left to the holder")
		})
	}
}
