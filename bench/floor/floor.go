// Package floor measures the raw Asynq floor for `make bench`: how fast one
// process can enqueue no-op tasks into Redis and have an in-process Asynq
// server take them off again. Nothing holdfast adds (Postgres intake,
// mailboxes, leases) is involved, so no holdfast write path can beat it.
package floor

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/cputime"
	"github.com/holdfast/holdfast/worker"
)

// TaskType is the type of the no-op tasks.
const TaskType = "bench:floor"

// Options size a run. Zero values take the defaults.
type Options struct {
	RedisURL    string // default redis://127.0.0.1:6379/0
	Tasks       int    // tasks to enqueue; default 40000
	Concurrency int    // Asynq server concurrency; default 64
	Enqueuers   int    // goroutines enqueueing; default 32
	Queue       string // queue name prefix; a random suffix makes each run's queue fresh; default "bench-floor"
	// Log receives Asynq's warnings and errors; nil discards them.
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	o.RedisURL = cmp.Or(o.RedisURL, "redis://127.0.0.1:6379/0")
	o.Tasks, o.Concurrency, o.Enqueuers = cmp.Or(max(o.Tasks, 0), 40000), cmp.Or(max(o.Concurrency, 0), 64), cmp.Or(max(o.Enqueuers, 0), 32)
	o.Queue = cmp.Or(o.Queue, "bench-floor")
	o.Log = cmp.Or(o.Log, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return o
}

// Result is what one run measured.
type Result struct {
	Queue       string `json:"queue"`
	Tasks       int    `json:"tasks"`
	Concurrency int    `json:"concurrency"`
	Enqueuers   int    `json:"enqueuers"`
	// Processed counts distinct tasks handled; Duplicates counts deliveries
	// beyond the first (Asynq delivers at least once).
	Processed  int `json:"processed"`
	Duplicates int `json:"duplicates"`
	// EnqueuePerSec is Tasks over the time from the first enqueue to the
	// last; ProcessedPerSec is Tasks over the time from the first enqueue
	// until the last task was handled, which is also TotalSeconds.
	EnqueuePerSec   float64 `json:"enqueuePerSec"`
	ProcessedPerSec float64 `json:"processedPerSec"`
	EnqueueSeconds  float64 `json:"enqueueSeconds"`
	TotalSeconds    float64 `json:"totalSeconds"`
	// CPUSeconds is the CPU the run cost from the first enqueue until the
	// last task was handled: "total" for the whole machine, "floor" for
	// this process (enqueuers and Asynq server), "redis" for every
	// redis-server on the machine and "rest" for anything else (see
	// cputime.Meter). Empty where /proc cannot be read.
	CPUSeconds map[string]float64 `json:"cpuSeconds,omitempty"`
}

// Run enqueues opt.Tasks no-op tasks into a fresh queue from opt.Enqueuers
// goroutines while an Asynq server in this process handles them, waits until
// every task has been handled once, then deletes the queue and its keys.
func Run(ctx context.Context, opt Options) (Result, error) {
	opt = opt.withDefaults()
	res := Result{Tasks: opt.Tasks, Concurrency: opt.Concurrency, Enqueuers: opt.Enqueuers}
	redisOpt, err := redis.ParseURL(opt.RedisURL)
	if err != nil {
		return res, fmt.Errorf("floor: parse redis url: %w", err)
	}
	// Pools as large as holdfast's (storage.OpenRedis): the floor must not be
	// held back by waiting for a connection.
	redisOpt.PoolSize = max(redisOpt.PoolSize, 64, opt.Enqueuers+8)
	rdb := redis.NewClient(redisOpt)
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return res, fmt.Errorf("floor: ping redis: %w", err)
	}
	res.Queue = opt.Queue + "-" + randomSuffix()

	seen := make([]atomic.Uint32, opt.Tasks)
	var distinct, dups atomic.Int64
	var doneAt time.Time
	done := make(chan struct{})
	mux := asynq.NewServeMux()
	mux.HandleFunc(TaskType, func(_ context.Context, t *asynq.Task) error {
		p := t.Payload()
		if len(p) != 8 || binary.BigEndian.Uint64(p) >= uint64(opt.Tasks) {
			return fmt.Errorf("floor: bad payload %x: %w", p, asynq.SkipRetry)
		}
		if seen[binary.BigEndian.Uint64(p)].Add(1) > 1 {
			dups.Add(1)
			return nil
		}
		if distinct.Add(1) == int64(opt.Tasks) {
			doneAt = time.Now() // published to Run by close(done)
			close(done)
		}
		return nil
	})
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency:       opt.Concurrency,
		Queues:            map[string]int{res.Queue: 1},
		TaskCheckInterval: 20 * time.Millisecond, // as holdfast's worker
		ShutdownTimeout:   5 * time.Second,
		Logger:            worker.AsynqLogger(opt.Log),
		LogLevel:          asynq.WarnLevel,
	})
	if err := srv.Start(mux); err != nil {
		return res, fmt.Errorf("floor: start server: %w", err)
	}
	defer cleanup(rdb, srv, res.Queue, opt.Log)

	client := asynq.NewClientFromRedisClient(rdb)
	cpu := cputime.Start("floor", map[string]string{"redis-server": "redis"})
	start := time.Now()
	if err := enqueue(ctx, client, res.Queue, opt.Tasks, opt.Enqueuers); err != nil {
		return res, err
	}
	enqueued := time.Since(start)

	select {
	case <-done:
	case <-ctx.Done():
		res.Processed, res.Duplicates = int(distinct.Load()), int(dups.Load())
		return res, fmt.Errorf("floor: waiting for %d tasks, %d handled: %w", opt.Tasks, res.Processed, ctx.Err())
	}
	total := doneAt.Sub(start)
	res.CPUSeconds = cpu.Stop(nil)
	res.Processed, res.Duplicates = int(distinct.Load()), int(dups.Load())
	res.EnqueueSeconds = enqueued.Seconds()
	res.TotalSeconds = total.Seconds()
	res.EnqueuePerSec = float64(opt.Tasks) / enqueued.Seconds()
	res.ProcessedPerSec = float64(opt.Tasks) / total.Seconds()
	return res, nil
}

// enqueue sends tasks 0..n-1 from workers goroutines, each taking the next
// sequence number from a shared counter; it stops at the first error.
func enqueue(ctx context.Context, client *asynq.Client, queue string, n, workers int) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			payload := make([]byte, 8)
			for {
				seq := next.Add(1) - 1
				if seq >= int64(n) || ctx.Err() != nil {
					return
				}
				binary.BigEndian.PutUint64(payload, uint64(seq))
				// NewTask keeps the slice; each task gets its own copy.
				t := asynq.NewTask(TaskType, append([]byte(nil), payload...), asynq.Queue(queue))
				if _, err := client.EnqueueContext(ctx, t); err != nil {
					cancel(fmt.Errorf("floor: enqueue: %w", err))
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// cleanup stops the server, then removes the queue and the statistics keys
// Asynq keeps beside it, so runs leave nothing behind in Redis.
func cleanup(rdb *redis.Client, srv *asynq.Server, queue string, log *slog.Logger) {
	srv.Shutdown()
	ctx := context.Background()
	if err := asynq.NewInspectorFromRedisClient(rdb).DeleteQueue(queue, true); err != nil {
		log.Warn("floor: delete queue", "queue", queue, "err", err)
	}
	iter := rdb.Scan(ctx, 0, "asynq:{"+queue+"}:*", 500).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		log.Warn("floor: delete queue keys", "queue", queue, "err", err)
	}
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
