package keyed_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/cmd/wiring"
	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/metrics"
	"github.com/holdfast/holdfast/probe"
	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/storage"
)

// benchPoolConns is the Postgres pool of the benchmarks' API and worker:
// Postgres allows 100 connections and other tests may run beside them.
const benchPoolConns = 8

// benchRig is what wiring.API and wiring.Worker build, over a test schema and a
// Redis database of its own: an intake dispatching through an API-side
// engine, and a worker-side engine that applies the probe.
type benchRig struct {
	pool   *pgxpool.Pool
	rdb    redis.UniversalClient
	intake *requests.Intake
	worker *keyed.Engine
	// plainWaiting is worker with QUIET_WAITING=false (keyed/waiting.go).
	plainWaiting *keyed.Engine
}

func newBenchRig(b *testing.B) *benchRig {
	b.Helper()
	ctx := context.Background()
	pgURL, _ := testenv.Postgres(b) // migrated; its own pool is too small for the API's concurrency
	redisURL, rdb := testenv.Redis(b)
	// The production lease and redrive timings rather than the tests' fast ones.
	cfg := testenv.Config(b, pgURL, redisURL, "LEASE_TTL", "5s", "REDRIVE_AFTER", "3s",
		"PG_MAX_CONNS", strconv.Itoa(benchPoolConns))
	pool, err := storage.OpenPostgres(ctx, cfg.DatabaseURL, cfg.PGMaxConns)
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	// As wiring.API: the engine admits with an inspector and the configured caps.
	m := metrics.NewPipeline(metrics.NewRegistry())
	api := keyed.New(pool, rdb, asynq.NewInspectorFromRedisClient(rdb), log, m, keyed.Options{KeyCap: cfg.KeyCap, QueueCap: cfg.QueueCap})
	b.Cleanup(func() { _ = api.Close() })
	plainWaiting := cfg
	plainWaiting.QuietWaiting = false
	return &benchRig{
		pool:         pool,
		rdb:          rdb,
		intake:       requests.NewIntake(requests.NewStore(pool), api, log),
		worker:       workerEngine(b, pool, rdb, cfg, log),
		plainWaiting: workerEngine(b, pool, rdb, plainWaiting, log),
	}
}

// workerEngine is the engine wiring.Worker builds, with the probe registered.
func workerEngine(b *testing.B, pool *pgxpool.Pool, rdb redis.UniversalClient, cfg config.Config, log *slog.Logger) *keyed.Engine {
	e := keyed.New(pool, rdb, nil, log, metrics.NewPipeline(metrics.NewRegistry()), wiring.KeyedOptions(cfg, "bench"))
	e.Register(probe.Type())
	b.Cleanup(func() { _ = e.Close() })
	return e
}

// probeSubmission is what POST /api/v1/probe {"keys": counters} hands intake.
func probeSubmission(counters ...string) requests.Submission {
	body, err := json.Marshal(probe.Payload{Keys: counters})
	if err != nil {
		panic(err)
	}
	keys := make([]string, len(counters))
	for i, c := range counters {
		keys[i] = probe.SerialKey(c)
	}
	return requests.Submission{Type: probe.TypeIncr, Queue: probe.Queue, UserID: "bench-user",
		Keys: keys, Payload: body, Route: "POST /api/v1/probe", TraceID: "bench"}
}

// probeSubmissions returns one submission per counter prefix-0 … prefix-(n-1).
func probeSubmissions(prefix string, n int) []requests.Submission {
	subs := make([]requests.Submission, n)
	for i := range subs {
		subs[i] = probeSubmission(prefix + "-" + strconv.Itoa(i))
	}
	return subs
}

// reportLatency reports the p50 and p99 of lat, in milliseconds.
func reportLatency(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// intakeParallelism × GOMAXPROCS goroutines accept at once in the parallel
// cases: enough to keep the 8-connection pool busy, as the API's handlers do.
const intakeParallelism = 8

// BenchmarkIntake times Intake.Accept of a probe write as the API calls it:
// one INSERT into requests, then the engine's Admit (ZCARD, cached for a
// second) and Dispatch (ZADD + ZCARD, then an Asynq enqueue). Writes go to
// 1,000 counters in turn or all to one hot counter, from one goroutine or
// from intakeParallelism × GOMAXPROCS, and in the idempotent cases each with
// an Idempotency-Key of its own, as a client that retries safely sends
// them: those must be accepted as fast as the others. No worker runs: the mailboxes and
// Asynq's queue only grow, as under a rush the workers have not caught up with.
func BenchmarkIntake(b *testing.B) {
	rig := newBenchRig(b)
	ctx := context.Background()
	cases := []struct {
		name       string
		counters   int
		parallel   bool
		idempotent bool
	}{
		{"serial/keys=1000", 1000, false, false},
		{"serial/hotkey", 1, false, false},
		{"parallel/keys=1000", 1000, true, false},
		{"parallel/hotkey", 1, true, false},
		{"parallel/keys=1000/idempotent", 1000, true, true},
		{"parallel/hotkey/idempotent", 1, true, true},
	}
	for i, c := range cases {
		// Each case writes to counters of its own, so the hot key's mailbox
		// starts empty.
		subs := probeSubmissions("intake-"+strconv.Itoa(i), c.counters)
		var next atomic.Int64 // across b.Run's rounds, so that no Idempotency-Key repeats
		b.Run(c.name, func(b *testing.B) {
			for i := range 20 { // warm the pools' connections and prepared statements
				_, _, err := rig.intake.Accept(ctx, subs[i%len(subs)])
				require.NoError(b, err)
			}
			accept := func(lat []time.Duration) []time.Duration {
				n := next.Add(1)
				sub := subs[int(n)%len(subs)]
				if c.idempotent {
					sub.IdempotencyKey = strconv.Itoa(i) + "-" + strconv.FormatInt(n, 10)
					sub.Fingerprint = []byte(sub.IdempotencyKey)
				}
				start := time.Now()
				_, created, err := rig.intake.Accept(ctx, sub)
				lat = append(lat, time.Since(start))
				if err != nil || !created {
					b.Errorf("accept: created %v, err %v", created, err)
				}
				return lat
			}
			var lat []time.Duration
			b.ResetTimer()
			if c.parallel {
				var mu sync.Mutex
				b.SetParallelism(intakeParallelism)
				b.RunParallel(func(pb *testing.PB) {
					mine := make([]time.Duration, 0, 1024)
					for pb.Next() {
						mine = accept(mine)
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				})
			} else {
				lat = make([]time.Duration, 0, b.N)
				for range b.N {
					lat = accept(lat)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "accepts/s")
			reportLatency(b, lat)
		})
	}
}
