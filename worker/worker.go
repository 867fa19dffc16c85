// Package worker is the worker binary: an Asynq server that applies writes
// through the keyed engine, the periodic reconcile task, and /healthz,
// /readyz and /metrics on WORKER_ADDR.
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

	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/internal/buildinfo"
	"github.com/holdfast/holdfast/internal/wiring"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/metrics"
	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/storage"
	"github.com/holdfast/holdfast/tasks"
)

// Options are what tests may vary beyond the environment.
type Options struct {
	// Listener for /metrics and health; nil listens on WORKER_ADDR.
	Listener net.Listener
	// Name identifies this process in logs; default host-pid.
	Name string
}

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

// Run applies writes of the given types until ctx ends, then shuts down
// gracefully: it stops fetching tasks, lets each drain finish its batch and
// hand its key on, and waits for handlers up to SHUTDOWN_TIMEOUT.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger, opt Options, modules ...Types) error {
	if opt.Name == "" {
		host, _ := os.Hostname()
		opt.Name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	log = log.With("worker", opt.Name)
	st, err := storage.Open(ctx, cfg.DatabaseURL, cfg.Redis, cfg.PGMaxConns, storage.SchemaAtStart(cfg.MigrateOnStart), storage.CustomPlans, storage.IdleTimeout(cfg.PGIdleTimeout))
	if err != nil {
		if ctx.Err() != nil { // told to stop while it started (waiting on the migration lock, say)
			return nil
		}
		return err
	}
	defer st.Close()
	storage.ServePprof(ctx, cfg.PprofAddr, log)
	go storage.WatchPool(ctx, st.Pool, "worker", storage.PoolWatchInterval, log)

	reg := metrics.NewRegistry()
	engine, periodic := assemble(st, cfg, log, opt.Name, reg, modules)
	defer engine.Close()
	srv, err := serve(st.Redis, cfg, log, engine, periodic)
	if err != nil {
		return err
	}
	sched, err := schedule(st.Redis, cfg, log, periodic)
	if err != nil {
		srv.shutdown()
		return err
	}
	// Recover at once what a crash or a lost Redis left behind.
	go func() {
		if err := engine.Reconcile(ctx); err != nil && ctx.Err() == nil {
			log.Warn("startup reconcile", "err", err)
		}
	}()

	hs, ln, err := serveHealth(st, reg, cfg.WorkerAddr, opt.Listener, log)
	if err != nil {
		sched.Shutdown()
		srv.shutdown()
		return err
	}
	log.Info("worker started", "addr", ln.Addr().String(), "queues", engine.Queues(), "concurrency", cfg.Concurrency)

	<-ctx.Done()
	log.Info("worker stopping")
	srv.stop()    // fetch no new tasks
	engine.Stop() // drains finish their batch and hand their key on
	sched.Shutdown()
	srv.shutdown() // wait for handlers
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	log.Info("worker stopped")
	return nil
}

// serveHealth serves the worker's /healthz, /readyz and /metrics on ln, or
// on addr when ln is nil.
func serveHealth(st *storage.Stores, reg *prometheus.Registry, addr string, ln net.Listener, log *slog.Logger) (*http.Server, net.Listener, error) {
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

// assemble builds the engine with every module's write types, and gathers
// the periodic tasks: the modules' and the pipeline's own.
func assemble(st *storage.Stores, cfg config.Config, log *slog.Logger, name string, reg *prometheus.Registry, modules []Types) (*keyed.Engine, []Periodic) {
	m := metrics.NewPipeline(reg)
	engine := keyed.New(st.Pool, st.Redis, nil, log, m, wiring.KeyedOptions(cfg, name))
	var periodic []Periodic
	for _, build := range modules {
		mod := build(st)
		for _, t := range mod.Types {
			engine.Register(t)
		}
		periodic = append(periodic, mod.Periodic...)
		reg.MustRegister(mod.Collectors...)
	}
	periodic = append(periodic, forget(engine, cfg.KeyForgetAfter, log))
	if cfg.RequestRetention > 0 {
		periodic = append(periodic, retention(requests.NewStore(st.Pool), cfg.RequestRetention, log))
	}
	for _, q := range engine.Queues() {
		if q != tasks.MaintenanceQueue {
			m.InitQueues(q)
		}
	}
	return engine, periodic
}

// serve starts the Asynq servers with the engine's handlers and the
// periodic tasks'.
func serve(rdb redis.UniversalClient, cfg config.Config, log *slog.Logger, engine *keyed.Engine, periodic []Periodic) (servers, error) {
	acfg := asynq.Config{
		Concurrency:              cfg.Concurrency,
		ShutdownTimeout:          cfg.ShutdownTimeout,
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

// schedule starts the scheduler that enqueues the reconciler and the
// periodic tasks on the maintenance queue.
func schedule(rdb redis.UniversalClient, cfg config.Config, log *slog.Logger, periodic []Periodic) (*asynq.Scheduler, error) {
	sched := asynq.NewSchedulerFromRedisClient(rdb, &asynq.SchedulerOpts{
		Logger: asynqLogger{log}, LogLevel: asynq.WarnLevel,
		PostEnqueueFunc: func(_ *asynq.TaskInfo, err error) {
			if err != nil && !errors.Is(err, asynq.ErrDuplicateTask) {
				log.Warn("periodic enqueue failed", "err", err)
			}
		},
	})
	every := fmt.Sprintf("@every %s", cfg.ReconcileInterval)
	if _, err := sched.Register(every, tasks.NewReconcile(cfg.ReconcileInterval)); err != nil {
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

// servers are a worker's Asynq servers, one per queue. Asynq's dequeue
// tries a server's queues one script call each, in an order shuffled by
// weight, until one has a task: a server of all four queues spent more
// than two calls per task while a rush filled one of them, and the tasks a
// rush leaves scheduled then cost 0.28 ms of CPU each to run as no-ops
// instead of 0.16 ms. A server per queue spends one call. Each vertical's
// queue gets base's handler slots of its own, the maintenance queue
// (reconciler, periodic tasks) a quarter as many.
type servers []*asynq.Server

func newServers(rdb redis.UniversalClient, queues []string, base asynq.Config) servers {
	out := make(servers, len(queues))
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
func (s servers) start(mux *asynq.ServeMux) error {
	for i, srv := range s {
		if err := srv.Start(mux); err != nil {
			s[:i].shutdown()
			return err
		}
	}
	return nil
}

// stop makes every server stop fetching tasks.
func (s servers) stop() {
	for _, srv := range s {
		srv.Stop()
	}
}

// shutdown waits for every server's handlers, all at once, so that
// SHUTDOWN_TIMEOUT bounds the whole.
func (s servers) shutdown() {
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

// retention deletes the terminal requests accepted and completed more than
// keep ago (requests.Store.DeleteExpired), every quarter of keep and at
// least once a minute, so the requests table stays bounded by rate × keep.
func retention(store *requests.Store, keep time.Duration, log *slog.Logger) Periodic {
	return Periodic{Type: tasks.TypeRetention, Every: min(time.Minute, max(keep/4, time.Second)),
		Handle: func(ctx context.Context) error {
			n, err := store.DeleteExpired(ctx, keep, requests.DeleteBatch)
			if n > 0 {
				log.Info("requests past retention deleted", "deleted", n, "retention", keep)
			}
			return err
		}}
}

// forget deletes the fencing state of keys idle for longer than after
// (keyed.Engine.Forget), every quarter of it and at least once a minute.
func forget(engine *keyed.Engine, after time.Duration, log *slog.Logger) Periodic {
	return Periodic{Type: tasks.TypeForget, Every: min(time.Minute, max(after/4, time.Second)),
		Handle: func(ctx context.Context) error {
			fences, marks, err := engine.Forget(ctx)
			if fences+marks > 0 {
				log.Info("idle keys' state forgotten", "fences", fences, "progressMarks", marks)
			}
			return err
		}}
}
