package keyed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/tasks"
)

// Dispatch: how intake hands a stored request to the protocol, its id in
// each key's mailbox and its task in the queue (doc.go, "The protocol").

// Dispatch adds r to its keys' mailboxes and enqueues its task. Both steps
// are idempotent, so the reconciler may repeat them.
func (e *Engine) Dispatch(ctx context.Context, r *requests.Request) error {
	postings, err := e.Post(ctx, []*requests.Request{r})
	if err != nil {
		return err
	}
	return e.Enqueue(ctx, r, postings[0])
}

// Post puts rs in their keys' mailboxes (scored by seq), all in one round
// trip, and returns what it saw right after each was added: the length of
// its longest mailbox and whether any of its keys' leases was held. Intake
// posts a group commit's whole batch at once.
func (e *Engine) Post(ctx context.Context, rs []*requests.Request) ([]requests.Posting, error) {
	// A request is told whether any of its keys was held once it was in the
	// mailboxes; one read per key serves all of a batch's requests on it.
	held := map[string]*redis.IntCmd{}
	pipe := e.rdb.Pipeline()
	cards := make([][]*redis.IntCmd, len(rs))
	for i, r := range rs {
		member := r.ID.String()
		cards[i] = make([]*redis.IntCmd, len(r.Keys))
		for j, k := range r.Keys {
			pipe.ZAddNX(ctx, mboxKey(k), redis.Z{Score: float64(r.Seq), Member: member})
			cards[i][j] = pipe.ZCard(ctx, mboxKey(k))
		}
	}
	// Read after every ZADD: a holder seen now finds the requests in the
	// mailbox before it can let the key go (a release is atomic with finding
	// the mailbox empty, a hand-off enqueues a drain, and the reconciler
	// re-drives a key whose holder died). Under Redis Cluster, a slot
	// migrating mid-pipeline can have the read answered first; the request
	// then waits for the reconciler, not forever.
	for _, r := range rs {
		for _, k := range r.Keys {
			if held[k] == nil {
				held[k] = pipe.Exists(ctx, leaseKey(k))
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("keyed: mailbox: %w", err)
	}
	now := time.Now()
	postings := make([]requests.Posting, len(rs))
	for i, r := range rs {
		for j, k := range r.Keys {
			n := cards[i][j].Val()
			e.backlog.Put(k, backlogSample{n, now})
			postings[i].Backlog = max(postings[i].Backlog, n)
			postings[i].Held = postings[i].Held || held[k].Val() == 1
		}
	}
	return postings, nil
}

// Enqueue enqueues r's task (TaskID = requestId), deferred when
// something else applies r first (see deferral). r must be in its mailboxes
// already: a task that finds its key's mailbox empty does nothing.
func (e *Engine) Enqueue(ctx context.Context, r *requests.Request, p requests.Posting) error {
	var later []asynq.Option
	if d := deferral(p, e.opt.DeferAfter); d > 0 {
		later = append(later, e.laterOption(d))
	}
	t, err := tasks.NewRequest(r.Type, r.Queue, r.ID.String(), r.Keys, r.Seq, later...)
	if err != nil {
		return err
	}
	if _, err := e.client.EnqueueContext(ctx, t); err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return fmt.Errorf("keyed: enqueue: %w", err)
	}
	return nil
}

// deferral is how long to defer the task of a request that something
// else applies first: the holder of one of its keys, when that key was
// held as the request entered its mailboxes (a group gathers a request's
// other keys, or makes way for the drain that does: group.go), or the
// drain that the tasks of the requests ahead of it start, when it waits
// behind more than DeferAfter others. The key's holder applies such a
// request in order whatever its task does, and the
// reconciler, not the task, recovers a key whose holder died; the task is
// there so Asynqmon shows the request (K1). Deferring it (deferred.go:
// folded with others into one task, or scheduled well past the expected
// drain) keeps one hot key's tasks from filling the pending list ahead of
// every other key (K4), even when they were accepted while no worker ran,
// and leaves the worker's slots and Redis to the drain while a rush lasts;
// it runs later as a no-op. A request that nothing else would apply, the
// doorbell of idle keys, has its task due at once. Deferring on any held
// key, not only the first (the one the task drains), keeps a cart whose
// long-tail option sorts first from starting a drain of its own at once
// that waits for the hot option (a fold still drains its first key, after
// the aggregator's wait; docs/benchmarks.md, "Measured speed-ups"). The
// duration is the schedule's; a folded task waits for the aggregator instead.
func deferral(p requests.Posting, after int) time.Duration {
	if p.Backlog <= int64(after) && !p.Held {
		return 0
	}
	return min(time.Minute+time.Duration(p.Backlog)*time.Millisecond, 10*time.Minute)
}
