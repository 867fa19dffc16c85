// Package worker is the serving side of the worker binary: the Asynq
// servers that apply writes through the keyed engine, the scheduler of the
// reconciler and the periodic tasks, and /healthz, /readyz and /metrics on
// WORKER_ADDR. The composition root (cmd/wiring.Worker) builds the
// engine and the modules and starts these.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/buildinfo"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/storage"
	"github.com/holdfast/holdfast/tasks"
)

// Module is what a vertical adds to the worker: its write types and its
// periodic tasks.
type Module struct {
	Types      []keyed.Type
	Periodic   []Periodic
	Collectors []prometheus.Collector // the vertical's own metrics, on the worker's /metrics
}

// Periodic is a task every worker's scheduler enqueues each Every; Asynq's
// uniqueness lock lets one copy through per period across replicas, and
// Handle must be safe to run twice at once anyway (SPEC §7).
type Periodic struct {
	Type   string
	Every  time.Duration
	Handle func(ctx context.Context) error
}

// Types builds a module from the process's connections.
type Types func(st *storage.Stores) Module

// ServeHealth serves the worker's /healthz, /readyz and /metrics on ln, or
// on addr (WORKER_ADDR) when ln is nil.
func ServeHealth(st *storage.Stores, reg *prometheus.Registry, addr string, ln net.Listener, log *slog.Logger) (*http.Server, net.Listener, error) {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, nil, fmt.Errorf("worker: listen: %w", err)
		}
	}
	hs := &http.Server{Handler: healthMux(st.Pool, st.Redis, reg), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("worker http", "err", err)
		}
	}()
	return hs, ln, nil
}

// Serve starts the Asynq servers with the engine's handlers and the
// periodic tasks': concurrency handler slots a queue (CONCURRENCY), and
// shutdownTimeout (SHUTDOWN_TIMEOUT) for the handlers to end in.
func Serve(rdb redis.UniversalClient, log *slog.Logger, engine *keyed.Engine, periodic []Periodic, concurrency int, shutdownTimeout time.Duration) (Servers, error) {
	acfg := asynq.Config{
		Concurrency:              concurrency,
		ShutdownTimeout:          shutdownTimeout,
		TaskCheckInterval:        20 * time.Millisecond,
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		RetryDelayFunc:           RetryDelay,
		Logger:                   asynqLogger{log},
		LogLevel:                 asynq.WarnLevel,
	}
	keyed.Aggregation(&acfg)
	srv := newServers(rdb, engine.Queues(), acfg)
	mux := asynq.NewServeMux()
	engine.Handle(mux)
	for _, p := range periodic {
		handle := p.Handle
		mux.HandleFunc(p.Type, func(ctx context.Context, _ *asynq.Task) error { return handle(ctx) })
	}
	if err := srv.start(mux); err != nil {
		return nil, fmt.Errorf("worker: start: %w", err)
	}
	return srv, nil
}

// Schedule starts the scheduler that enqueues the reconciler, every
// reconcile (RECONCILE_INTERVAL), and the periodic tasks on the
// maintenance queue.
func Schedule(rdb redis.UniversalClient, log *slog.Logger, periodic []Periodic, reconcile time.Duration) (*asynq.Scheduler, error) {
	sched := asynq.NewSchedulerFromRedisClient(rdb, &asynq.SchedulerOpts{
		Logger: asynqLogger{log}, LogLevel: asynq.WarnLevel,
		PostEnqueueFunc: func(_ *asynq.TaskInfo, err error) {
			if err != nil && !errors.Is(err, asynq.ErrDuplicateTask) {
				log.Warn("periodic enqueue failed", "err", err)
			}
		},
	})
	every := fmt.Sprintf("@every %s", reconcile)
	if _, err := sched.Register(every, tasks.NewReconcile(reconcile)); err != nil {
		return nil, fmt.Errorf("worker: schedule reconcile: %w", err)
	}
	for _, p := range periodic {
		task := asynq.NewTask(p.Type, nil, asynq.Queue(tasks.MaintenanceQueue), asynq.MaxRetry(tasks.PeriodicRetries),
			asynq.Unique(max(p.Every-500*time.Millisecond, time.Second)))
		if _, err := sched.Register(fmt.Sprintf("@every %s", p.Every), task); err != nil {
			return nil, fmt.Errorf("worker: schedule %s: %w", p.Type, err)
		}
	}
	if err := sched.Start(); err != nil {
		return nil, fmt.Errorf("worker: start scheduler: %w", err)
	}
	return sched, nil
}

// Servers are a worker's Asynq servers, one per queue. Asynq's dequeue
// tries a server's queues one script call each, in an order shuffled by
// weight, until one has a task: a server of all four queues spent more
// than two calls per task while a rush filled one of them, and the tasks a
// rush leaves scheduled then cost 0.28 ms of CPU each to run as no-ops
// instead of 0.16 ms. A server per queue spends one call. Each vertical's
// queue gets base's handler slots of its own, the maintenance queue
// (reconciler, periodic tasks) a quarter as many.
type Servers []*asynq.Server

func newServers(rdb redis.UniversalClient, queues []string, base asynq.Config) Servers {
	out := make(Servers, len(queues))
	for i, q := range queues {
		cfg := base
		if q == tasks.MaintenanceQueue {
			cfg.Concurrency = max(1, base.Concurrency/4)
		}
		cfg.Queues = map[string]int{q: 1}
		out[i] = asynq.NewServerFromRedisClient(rdb, cfg)
	}
	return out
}

// start starts every server, or none.
func (s Servers) start(mux *asynq.ServeMux) error {
	for i, srv := range s {
		if err := srv.Start(mux); err != nil {
			s[:i].Shutdown()
			return err
		}
	}
	return nil
}

// Stop makes every server stop fetching tasks.
func (s Servers) Stop() {
	for _, srv := range s {
		srv.Stop()
	}
}

// Shutdown waits for every server's handlers, all at once, so that
// SHUTDOWN_TIMEOUT bounds the whole.
func (s Servers) Shutdown() {
	var wg sync.WaitGroup
	for _, srv := range s {
		wg.Go(srv.Shutdown)
	}
	wg.Wait()
}

// RetryDelay retries failed tasks quickly (a failed drain leaves its key
// waiting): 200 ms doubling up to 10 s.
func RetryDelay(n int, _ error, _ *asynq.Task) time.Duration {
	d := 200 * time.Millisecond << min(n, 6)
	return min(d, 10*time.Second)
}

func healthMux(pool *pgxpool.Pool, rdb redis.UniversalClient, reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	build := buildinfo.Read()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"status":"ok","version":%q,"revision":%q}`, build.Version, build.Revision)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "application/json")
		if err := storage.Ready(ctx, pool, rdb); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, `{"error":{"code":"UNAVAILABLE","message":%q,"traceId":"","meta":{}}}`, err.Error())
			return
		}
		_, _ = w.Write([]byte(`{"status":"ready"}`))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// AsynqLogger routes Asynq's logs into l.
func AsynqLogger(l *slog.Logger) asynq.Logger { return asynqLogger{l} }

type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...)) }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...)) }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...)) }
func (a asynqLogger) Error(args ...any) {
	msg := fmt.Sprint(args...)
	if strings.Contains(msg, "connection is shared") { // Asynq declining to close our client at shutdown
		a.l.Debug(msg)
		return
	}
	a.l.Error(msg)
}
func (a asynqLogger) Fatal(args ...any) { a.l.Error(fmt.Sprint(args...)); os.Exit(1) }

// Retention deletes the terminal requests accepted and completed more than
// keep ago (requests.Store.DeleteExpired), every quarter of keep and at
// least once a minute, so the requests table stays bounded by rate × keep.
func Retention(store *requests.Store, keep time.Duration, log *slog.Logger) Periodic {
	return Periodic{Type: tasks.TypeRetention, Every: min(time.Minute, max(keep/4, time.Second)),
		Handle: func(ctx context.Context) error {
			n, err := store.DeleteExpired(ctx, keep, requests.DeleteBatch)
			if n > 0 {
				log.Info("requests past retention deleted", "deleted", n, "retention", keep)
			}
			return err
		}}
}

// Forget deletes the fencing state of keys idle for longer than after
// (keyed.Engine.Forget), every quarter of it and at least once a minute.
func Forget(engine *keyed.Engine, after time.Duration, log *slog.Logger) Periodic {
	return Periodic{Type: tasks.TypeForget, Every: min(time.Minute, max(after/4, time.Second)),
		Handle: func(ctx context.Context) error {
			fences, marks, err := engine.Forget(ctx)
			if fences+marks > 0 {
				log.Info("idle keys' state forgotten", "fences", fences, "progressMarks", marks)
			}
			return err
		}}
}
