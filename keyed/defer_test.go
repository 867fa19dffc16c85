package keyed

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/requests"
)

// A request that enters its key's mailbox while the key is held has its
// task scheduled for later: the holder applies it, and its task only shows
// it in Asynqmon (K1). A request on an idle key rings the doorbell: its
// task is due at once.
func TestTaskIsDeferredWhileItsKeyIsHeld(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	ctx := context.Background()
	e := r.engineTTL(t, "w", 8, holdingTTL)
	insp := asynq.NewInspectorFromRedisClient(r.rdb)
	task := func(id uuid.UUID) *asynq.TaskInfo {
		t.Helper()
		info, err := insp.GetTaskInfo("q", id.String())
		require.NoError(t, err)
		return info
	}

	idle := r.accept(t)
	require.Equal(t, asynq.TaskStatePending, task(idle).State, "an idle key's request is due at once")
	require.NoError(t, e.Drain(ctx, "k", "q"))

	l, ok, err := e.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.True(t, ok)
	held := []uuid.UUID{r.accept(t), r.accept(t)}
	for _, id := range held {
		info := task(id)
		require.Equal(t, asynq.TaskStateScheduled, info.State, "the key's holder applies it")
		require.Greater(t, time.Until(info.NextProcessAt), 50*time.Second)
	}
	require.NoError(t, e.drainHeld(ctx, l, "q"))
	got := r.applied(t)
	require.Len(t, got, 3)
	require.Equal(t, held, []uuid.UUID{got[1].ID, got[2].ID}, "applied by the holder, in order, without their tasks")
	require.Zero(t, r.rdb.Exists(ctx, leaseKey("k")).Val(), "the holder let go once the mailbox was empty")

	next := r.accept(t)
	require.Equal(t, asynq.TaskStatePending, task(next).State, "idle again: due at once")
}

// Races posts against a holder that drains and lets go over and over: every
// request is applied by the holder or by a task due at once, so no request
// waits for a deferred task. The control shows what the order inside Post
// guards against: a lease read before the request is in the mailbox may
// belong to a holder that lets go before the request arrives, which then
// has neither a holder nor a task due.
func TestDeferredTasksLeaveNoRequestBehind(t *testing.T) {
	t.Parallel()
	r := newFenceRig(t)
	ctx := context.Background()
	e := r.engineTTL(t, "w", 8, holdingTTL)
	const n = 200

	stop, drained := make(chan struct{}), make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				drained <- nil
				return
			default:
			}
			if err := e.Drain(ctx, "k", "q"); err != nil {
				drained <- err
				return
			}
			time.Sleep(rand.N(4 * time.Millisecond)) // idle now and then
		}
	}()
	// A few clients at a time, so the backlog stays short and posts find
	// the key now held, now free.
	const clients = 2
	ids := make([]uuid.UUID, n)
	var accepts sync.WaitGroup
	for c := range clients {
		accepts.Go(func() {
			for i := c; i < n; i += clients {
				if i%50 < clients { // now and then, post to a key just let go
					for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) &&
						r.rdb.Exists(ctx, leaseKey("k")).Val() == 1; {
						time.Sleep(time.Millisecond)
					}
				}
				req, _, err := r.intake.Accept(ctx, requests.Submission{Type: "fence.test", Queue: "q", UserID: "u", Keys: []string{"k"}})
				if err == nil {
					ids[i] = req.ID
				}
				time.Sleep(rand.N(4 * time.Millisecond))
			}
		})
	}
	accepts.Wait()
	close(stop)
	require.NoError(t, <-drained)

	// The worker runs the tasks that are due; the deferred ones would fire
	// a minute later.
	due, err := asynq.NewInspectorFromRedisClient(r.rdb).ListPendingTasks("q", asynq.PageSize(n+1))
	require.NoError(t, err)
	for _, info := range due {
		require.NoError(t, e.handleRequest(ctx, asynq.NewTask(info.Type, info.Payload)))
	}
	require.Less(t, len(due), n*9/10, "most tasks were deferred")
	require.Greater(t, len(due), 1, "the key was free at times")
	applied := map[uuid.UUID]bool{}
	for _, a := range r.applied(t) {
		applied[a.ID] = true
	}
	for _, id := range ids {
		require.True(t, applied[id], "request %s was left behind", id)
	}

	// Control: the lease read first, then the holder lets go, then the post.
	l, ok, err := e.TryAcquire(ctx, "k")
	require.NoError(t, err)
	require.True(t, ok)
	held := r.rdb.Exists(ctx, leaseKey("k")).Val() == 1
	require.NoError(t, e.drainHeld(ctx, l, "q"))
	stranded, _, err := requests.NewStore(r.pool).Insert(ctx, &requests.Submission{Type: "fence.test", Queue: "q",
		UserID: "u", Keys: []string{"k"}, Payload: []byte(`{}`)}, uuid.New(), time.Now().UTC())
	require.NoError(t, err)
	require.NoError(t, r.rdb.ZAddNX(ctx, mboxKey("k"), redis.Z{Score: float64(stranded.Seq), Member: stranded.ID.String()}).Err())
	require.NoError(t, e.Enqueue(ctx, stranded, requests.Posting{Backlog: 1, Held: held}))
	info, err := asynq.NewInspectorFromRedisClient(r.rdb).GetTaskInfo("q", stranded.ID.String())
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStateScheduled, info.State)
	require.Zero(t, r.rdb.Exists(ctx, leaseKey("k")).Val(), "no holder")
	require.Equal(t, []string{stranded.ID.String()}, r.rdb.ZRange(ctx, mboxKey("k"), 0, -1).Val(),
		"left in the mailbox with nothing due to apply it")
}
