package systest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"golang.org/x/sync/errgroup"

	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/storage"
	"github.com/holdfast/holdfast/tasks"
	"github.com/holdfast/holdfast/worker"
)

// The unguarded worker is the handler-only design SPEC §3 warns against,
// built here, in test code, from holdfast's own appliers for the control
// cases: each request's task applies that request by itself as soon as it
// runs, in a transaction of its own, with no lease, no fence and no mailbox
// order. The API is the real one, so requests are accepted, posted and
// enqueued as always; the tasks the API defers (they would wait for a
// drain) are folded here into one task that applies each of them the same
// way.

// unguardedBatch is the task a fold of deferred request tasks becomes.
const unguardedBatch = "systest:unguarded-batch"

// unguardedToken is every unguarded "holder's" token: the appliers' own
// Redis scripts check it against the key's lease, which runUnguarded sets
// to it for every key, so each handler passes as if it held the lease.
const unguardedToken = 1

// runUnguarded runs an unguarded worker on cfg's stores until ctx ends;
// ln serves its readiness.
func runUnguarded(ctx context.Context, cfg config.Config, ln net.Listener, modules []worker.Types) error {
	st, err := storage.Open(ctx, cfg.DatabaseURL, cfg.Redis, cfg.PGMaxConns, storage.MigrateSchema)
	if err != nil {
		return err
	}
	defer st.Close()
	types := map[string]keyed.Type{}
	queues := map[string]int{}
	for _, build := range modules {
		for _, t := range build(st).Types {
			types[t.Name] = t
			queues[t.Queue] = 1
		}
	}
	u := &unguarded{st: st, types: types, slots: cfg.Concurrency}
	srv := asynq.NewServerFromRedisClient(st.Redis, asynq.Config{
		Concurrency: cfg.Concurrency, Queues: queues, TaskCheckInterval: 20 * time.Millisecond,
		GroupGracePeriod: time.Second, GroupMaxSize: 1000, GroupAggregator: asynq.GroupAggregatorFunc(foldUnguarded),
		LogLevel: asynq.ErrorLevel,
		// A run that collided is retried as the worker's are, not after
		// Asynq's default of 15 s or more.
		RetryDelayFunc: worker.RetryDelay,
	})
	mux := asynq.NewServeMux()
	for name := range types {
		mux.HandleFunc(name, u.handleRequest)
	}
	mux.HandleFunc(unguardedBatch, u.handleBatch)
	if err := srv.Start(mux); err != nil {
		return err
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}), ReadHeaderTimeout: time.Second}
	go func() { _ = hs.Serve(ln) }()
	<-ctx.Done()
	srv.Shutdown()
	return hs.Close()
}

type unguarded struct {
	st    *storage.Stores
	types map[string]keyed.Type
	slots int // requests of a folded batch applied at once
}

// foldUnguarded folds deferred request tasks into one batch task that
// carries each of their payloads.
func foldUnguarded(_ string, ts []*asynq.Task) *asynq.Task {
	var batch []tasks.RequestPayload
	for _, t := range ts {
		var p tasks.RequestPayload
		if tasks.Decode(t, &p) == nil {
			batch = append(batch, p)
		}
	}
	b, _ := json.Marshal(batch)
	return asynq.NewTask(unguardedBatch, b)
}

func (u *unguarded) handleRequest(ctx context.Context, t *asynq.Task) error {
	var p tasks.RequestPayload
	if err := tasks.Decode(t, &p); err != nil {
		return err
	}
	return u.apply(ctx, p.RequestID, p.Keys)
}

func (u *unguarded) handleBatch(ctx context.Context, t *asynq.Task) error {
	var batch []tasks.RequestPayload
	if err := tasks.Decode(t, &batch); err != nil {
		return err
	}
	// Each at once, as their own tasks would have run on idle slots.
	errs := make([]error, len(batch))
	var g errgroup.Group
	g.SetLimit(u.slots)
	for i, r := range batch {
		g.Go(func() error { errs[i] = u.apply(ctx, r.RequestID, r.Keys); return nil })
	}
	_ = g.Wait()
	return errors.Join(errs...)
}

// apply applies one request alone, with its type's applier, and announces
// its outcome; a request already terminal is left alone.
func (u *unguarded) apply(ctx context.Context, id string, keys []string) error {
	rid, err := uuid.Parse(id)
	if err != nil {
		return fmt.Errorf("request id %q: %w: %w", id, err, asynq.SkipRetry)
	}
	fences := map[string]int64{}
	pipe := u.st.Redis.Pipeline()
	for _, k := range requests.NormalizeKeys(keys) {
		fences[k] = unguardedToken
		pipe.Set(ctx, keyed.LeaseKey(k), unguardedToken, time.Minute)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	tx, err := u.st.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	open, err := requests.LockOpen(ctx, tx, []uuid.UUID{rid})
	if err != nil || len(open) == 0 {
		return err
	}
	typ, ok := u.types[open[0].Type]
	if !ok {
		return fmt.Errorf("no applier for %s: %w", open[0].Type, asynq.SkipRetry)
	}
	now := time.Now().UTC()
	b := &keyed.Batch{Requests: open, Fences: fences, Now: now, Worker: "unguarded"}
	outs, err := typ.Applier.Apply(ctx, tx, b)
	if err != nil {
		return err
	}
	if err := requests.Complete(ctx, tx, open, outs, now); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	b.Committed(ctx)
	if msg, err := requests.DoneMessage(open); err == nil {
		_ = u.st.Redis.Publish(ctx, requests.DoneChannel, msg).Err() // long polls read Postgres without it
	}
	return nil
}
