package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Batcher sends the pipelines of concurrent callers to Redis together, as
// the group commit does for Postgres: one pipeline is in flight at a time,
// and the callers that arrive meanwhile go together in the next one, in one
// round trip. A lone caller's commands go at once. Under a rush this turns
// one round trip per request into one per batch: fewer system calls in the
// process and in Redis, which is most of what a small command costs.
//
// A waiting caller whose pipeline's turn has come leads it; the leader of a
// batch hands its place to the next waiter, so no caller sends more than
// its own batch.
type Batcher struct {
	rdb   redis.UniversalClient
	turns Turns[*batchCall]
}

type batchCall struct {
	ctx context.Context
	fn  func(redis.Pipeliner) error
	err error
}

// NewBatcher batches pipelines on rdb.
func NewBatcher(rdb redis.UniversalClient) *Batcher { return &Batcher{rdb: rdb} }

// Pipelined is redis.Pipeliner's Pipelined for a caller among many: fn
// queues commands on the shared pipeline and keeps them to read their
// results once Pipelined returns. The error is the first of fn's own
// commands', or fn's. fn must only queue commands; it runs on whichever
// goroutine sends the batch, and what it queued is sent even when it
// returns an error.
func (b *Batcher) Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) error {
	c := &batchCall{ctx: ctx, fn: fn}
	b.turns.Take(c, b.send)
	return c.err
}

// send runs batch as one pipeline and tells each caller its error. If a
// caller's fn or go-redis panics, every caller of the batch gets an error
// and the panic goes on (turns hands the lead on all the same).
func (b *Batcher) send(batch []*batchCall) {
	defer func() {
		if r := recover(); r != nil {
			for _, c := range batch {
				c.err = fmt.Errorf("storage: batched pipeline panicked: %v", r)
			}
			panic(r)
		}
	}()
	pipe := b.rdb.Pipeline()
	ends := make([]int, len(batch))
	for i, c := range batch {
		c.err = c.fn(pipe)
		ends[i] = pipe.Len()
	}
	// A caller's cancellation must not fail the others' commands, but the
	// round trip ends by the earliest caller's deadline: the batch never
	// keeps a caller past its own, and a caller queued behind it waits no
	// longer than the batch's callers, who came before it, may. (Without
	// any deadline, go-redis' timeouts bound it.)
	ctx, cancel := earliestDeadline(batch, func(c *batchCall) context.Context { return c.ctx })
	defer cancel()
	cmds, _ := pipe.Exec(ctx)
	start := 0
	for i, c := range batch {
		for _, cmd := range cmds[start:ends[i]] {
			if err := cmd.Err(); err != nil && c.err == nil {
				c.err = err
			}
		}
		start = ends[i]
	}
}

// BatchScripts returns rdb with its script calls (EVALSHA, EVAL and their
// read-only forms) sent through a Batcher, and every other command as rdb
// sends it. Asynq's client makes each enqueue one script call; given this
// client, the enqueues of concurrent requests reach Redis together. It
// leans on how Asynq's client talks to Redis (one script call an enqueue,
// through the client it was given); should that change, enqueues go one by
// one again, still correct.
//
// Its gain, measured in seven pairs (A/B pairs, docs/benchmarks.md, fcfs-rush of 40,000
// users on two cores, 2026-11-26; five against a build that bypassed it,
// two with BATCH_ENQUEUE=false on the same build): Redis CPU a journey
// 0.034–0.040 ms against 0.042–0.047, lower in every pair, and CPU a
// journey overall lower in four (the other three within 0.002 ms); the
// rate was higher in four pairs of seven (means 6,090 against 5,847 a
// second), within the noise. It is kept for
// Redis, the one process holdfast cannot scale out (docs/benchmarks.md).
// BATCH_ENQUEUE=false (keyed.Options.EnqueueEach) turns it off.
func BatchScripts(rdb redis.UniversalClient) redis.UniversalClient {
	return &batchedScripts{UniversalClient: rdb, b: NewBatcher(rdb)}
}

type batchedScripts struct {
	redis.UniversalClient
	b *Batcher
}

// script runs one script command, queued by add, in the next batch.
func (c *batchedScripts) script(ctx context.Context, add func(redis.Pipeliner) *redis.Cmd) *redis.Cmd {
	var cmd *redis.Cmd
	err := c.b.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = add(p)
		return nil
	})
	if cmd == nil { // never queued: an earlier caller in the batch panicked
		cmd = redis.NewCmd(ctx)
	}
	if err != nil && cmd.Err() == nil { // the batch failed without reaching cmd
		cmd.SetErr(err)
	}
	return cmd
}

func (c *batchedScripts) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return c.script(ctx, func(p redis.Pipeliner) *redis.Cmd { return p.EvalSha(ctx, sha1, keys, args...) })
}

func (c *batchedScripts) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return c.script(ctx, func(p redis.Pipeliner) *redis.Cmd { return p.EvalShaRO(ctx, sha1, keys, args...) })
}

func (c *batchedScripts) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.script(ctx, func(p redis.Pipeliner) *redis.Cmd { return p.Eval(ctx, script, keys, args...) })
}

func (c *batchedScripts) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return c.script(ctx, func(p redis.Pipeliner) *redis.Cmd { return p.EvalRO(ctx, script, keys, args...) })
}

// earliestDeadline is a context for work done for all of batch, whose
// callers' contexts ctxOf gives: not cancelled when one caller goes away,
// and over by the earliest of their deadlines, if any has one.
func earliestDeadline[T any](batch []T, ctxOf func(T) context.Context) (context.Context, context.CancelFunc) {
	var first time.Time
	for _, c := range batch {
		if d, ok := ctxOf(c).Deadline(); ok && (first.IsZero() || d.Before(first)) {
			first = d
		}
	}
	ctx := context.WithoutCancel(ctxOf(batch[0]))
	if first.IsZero() {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, first)
}
