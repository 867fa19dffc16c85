package wiring

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/metrics"
	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/storage"
	"github.com/holdfast/holdfast/tasks"
	"github.com/holdfast/holdfast/worker"
)

// Worker is the worker binary.
type Worker struct {
	Config config.Config
	Log    *slog.Logger
	// Listener serves /metrics and health; nil listens on WORKER_ADDR.
	Listener net.Listener
	// Name identifies this process in logs and leases; default host-pid.
	Name string
	// Modules are the writes and periodic tasks it runs; nil: every
	// vertical's (Modules).
	Modules []worker.Types
}

// Run applies writes until ctx ends, then shuts down gracefully: it stops
// fetching tasks, lets each drain finish its batch and hand its key on,
// and waits for handlers up to SHUTDOWN_TIMEOUT.
func (w *Worker) Run(ctx context.Context) error {
	cfg := w.Config
	name := cmp.Or(w.Name, hostPID())
	log := w.Log.With("worker", name)
	st, err := openStores(ctx, cfg, storage.CustomPlans)
	if st == nil {
		return err
	}
	defer st.Close()
	storage.ServePprof(ctx, cfg.PprofAddr, log)
	go storage.WatchPool(ctx, st.Pool, "worker", storage.PoolWatchInterval, log)

	reg := metrics.NewRegistry()
	engine, periodic := w.assemble(st, log, name, reg)
	defer engine.Close()
	srv, err := worker.Serve(st.Redis, log, engine, periodic, cfg.Concurrency, cfg.ShutdownTimeout)
	if err != nil {
		return err
	}
	sched, err := worker.Schedule(st.Redis, log, periodic, cfg.ReconcileInterval)
	if err != nil {
		srv.Shutdown()
		return err
	}
	// Recover at once what a crash or a lost Redis left behind.
	go func() {
		if err := engine.Reconcile(ctx); err != nil && ctx.Err() == nil {
			log.Warn("startup reconcile", "err", err)
		}
	}()
	hs, ln, err := worker.ServeHealth(st, reg, cfg.WorkerAddr, w.Listener, log)
	if err != nil {
		sched.Shutdown()
		srv.Shutdown()
		return err
	}
	log.Info("worker started", "addr", ln.Addr().String(), "queues", engine.Queues(), "concurrency", cfg.Concurrency)

	<-ctx.Done()
	log.Info("worker stopping")
	srv.Stop()    // fetch no new tasks
	engine.Stop() // drains finish their batch and hand their key on
	sched.Shutdown()
	srv.Shutdown() // wait for handlers
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	log.Info("worker stopped")
	return nil
}

// assemble builds the engine with every module's write types, and gathers
// the periodic tasks: the modules' and the pipeline's own.
func (w *Worker) assemble(st *storage.Stores, log *slog.Logger, name string, reg *prometheus.Registry) (*keyed.Engine, []worker.Periodic) {
	cfg := w.Config
	m := metrics.NewPipeline(reg)
	engine := keyed.New(st.Pool, st.Redis, nil, log, m, KeyedOptions(cfg, name))
	modules := w.Modules
	if modules == nil {
		modules = Modules(cfg)
	}
	var periodic []worker.Periodic
	for _, build := range modules {
		mod := build(st)
		for _, t := range mod.Types {
			engine.Register(t)
		}
		periodic = append(periodic, mod.Periodic...)
		reg.MustRegister(mod.Collectors...)
	}
	periodic = append(periodic, worker.Forget(engine, cfg.KeyForgetAfter, log))
	if cfg.RequestRetention > 0 {
		periodic = append(periodic, worker.Retention(requests.NewStore(st.Pool), cfg.RequestRetention, log))
	}
	for _, q := range engine.Queues() {
		if q != tasks.MaintenanceQueue {
			m.InitQueues(q)
		}
	}
	return engine, periodic
}

// hostPID names a worker by its host and process id.
func hostPID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}
