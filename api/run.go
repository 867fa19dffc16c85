package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/hibiken/asynq"
	asynqmetrics "github.com/hibiken/asynq/x/metrics"
	"github.com/hibiken/asynqmon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/auth"
	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/internal/wiring"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/metrics"
	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/storage"
)

// Run is the API binary: it connects, migrates, serves on ln (or HTTP_ADDR
// when ln is nil) until ctx ends, drains for SHUTDOWN_DRAIN_DELAY, then
// shuts down gracefully.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger, ln net.Listener, mounts ...Mount) error {
	st, err := storage.Open(ctx, cfg.DatabaseURL, cfg.Redis, cfg.PGMaxConns, storage.SchemaAtStart(cfg.MigrateOnStart), storage.IdleTimeout(cfg.PGIdleTimeout))
	if err != nil {
		if ctx.Err() != nil { // told to stop while it started (waiting on the migration lock, say)
			return nil
		}
		return err
	}
	defer st.Close()
	// Told to stop (stopping ends), the API drains first (Server.drain):
	// everything runs on until ctx ends, SHUTDOWN_DRAIN_DELAY later.
	stopping := ctx
	ctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	storage.ServePprof(ctx, cfg.PprofAddr, log)
	pool, rdb := st.Pool, st.Redis
	go storage.WatchPool(ctx, pool, "api", storage.PoolWatchInterval, log)
	away := breaker(rdb, log)

	insp := asynq.NewInspectorFromRedisClient(rdb)
	store := requests.NewStore(pool)
	reg, m := newRegistry(rdb, insp, store)
	reg.MustRegister(away)

	engine := keyed.New(pool, rdb, insp, log, m, wiring.KeyedOptions(cfg, "api"))
	defer engine.Close()
	notifier := NewNotifier(rdb)
	nctx, stopNotifier := context.WithCancel(ctx)
	defer stopNotifier()
	go notifier.Run(nctx)

	mon, err := monitoring(cfg)
	if err != nil {
		return err
	}
	if mon != nil {
		defer mon.Close()
	}

	intake := newIntake(cfg, store, engine, notifier, log)
	var public *asynqmon.HTTPHandler // Asynqmon on HTTP_ADDR
	if cfg.MonitoringAddr == "" {
		public = mon
	}
	signer := auth.NewSigner(cfg.JWTSecret).AlsoVerifying(cfg.JWTSecretPrevious)
	tokens, err := bearerTokens(ctx, cfg, signer, log)
	if err != nil {
		return err
	}
	srv := New(cfg, Deps{
		Pool: pool, Redis: rdb, Store: store, Notifier: notifier,
		Intake: intake, Signer: signer, Tokens: tokens,
		Registry: reg, Metrics: m, HTTP: metrics.NewHTTP(reg), Log: log, Monitoring: public,
	}, mounts...)
	if err := srv.servePrivate(ctx, reg, mon, public == nil); err != nil {
		return err
	}
	context.AfterFunc(stopping, func() { srv.drain(stop) })
	return listenAndServe(ctx, srv, cfg.HTTPAddr, ln, log)
}

// breaker puts a circuit breaker on the API's Redis client
// (storage.Breaker) and returns its gauge, 1 while it is open.
func breaker(rdb redis.UniversalClient, log *slog.Logger) prometheus.Gauge {
	away := prometheus.NewGauge(prometheus.GaugeOpts{Name: "holdfast_redis_breaker_open",
		Help: "1 while the API's calls to Redis fail at once, Redis having failed the calls before (storage.Breaker); else 0."})
	rdb.AddHook(storage.NewBreaker(log, func(open bool) {
		away.Set(0)
		if open {
			away.Set(1)
		}
	}))
	return away
}

// newRegistry is the API's metrics. The one collector of Asynq's queue
// metrics lives in the API, and so do the scrape-time reads of Redis
// memory and of the oldest open request: an API runs even when no worker
// does, which is when they matter.
func newRegistry(rdb redis.UniversalClient, insp *asynq.Inspector, store *requests.Store) (*prometheus.Registry, *metrics.Pipeline) {
	reg := metrics.NewRegistry()
	m := metrics.NewPipeline(reg)
	reg.MustRegister(asynqmetrics.NewQueueMetricsCollector(insp),
		metrics.NewRedisMemory(rdb), metrics.NewOldestOpen(store))
	return reg, m
}

// newIntake is the API's intake, as the configuration shapes it.
func newIntake(cfg config.Config, store *requests.Store, engine *keyed.Engine, notifier *Notifier, log *slog.Logger) *requests.Intake {
	intake := requests.NewIntake(store, engine, log)
	intake.SetTimeout(cfg.DependencyTimeout)
	intake.CommitEach = !cfg.GroupCommit
	if cfg.AnnouncedViews {
		intake.Tracker = notifier // it keeps the views of what it tracks for them
	}
	return intake
}

// servePrivate serves what is kept off the public address until ctx ends:
// /metrics on METRICS_ADDR, Asynqmon (mon, when ownPort) on
// MONITORING_ADDR.
func (s *Server) servePrivate(ctx context.Context, reg *prometheus.Registry, mon *asynqmon.HTTPHandler, ownPort bool) error {
	if s.cfg.MetricsAddr != "" {
		if err := serveMetrics(ctx, s.cfg.MetricsAddr, reg, s.Log); err != nil {
			return err
		}
	}
	if mon != nil && ownPort {
		return s.serveMonitoring(ctx, s.cfg.MonitoringAddr, mon, s.Log)
	}
	return nil
}

// monitoring is Asynqmon, on a Redis connection of its own to the same
// deployment, or nil when MONITORING_ADDR is off. With PROMETHEUS_URL its
// Metrics tab charts the queues from the Prometheus that scrapes this
// API's Asynq collector.
func monitoring(cfg config.Config) (*asynqmon.HTTPHandler, error) {
	if cfg.MonitoringAddr == config.MonitoringOff {
		return nil, nil
	}
	redisOpt, err := storage.AsynqRedisOpt(cfg.Redis)
	if err != nil {
		return nil, fmt.Errorf("api: redis for monitoring: %w", err)
	}
	return asynqmon.New(asynqmon.Options{RootPath: "/monitoring", RedisConnOpt: redisOpt, PrometheusAddress: cfg.PrometheusURL}), nil
}

// listenAndServe serves srv on ln, or on addr when ln is nil, until ctx
// ends.
func listenAndServe(ctx context.Context, srv *Server, addr string, ln net.Listener, log *slog.Logger) error {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("api: listen: %w", err)
		}
	}
	log.Info("api listening", "addr", ln.Addr().String())
	err := srv.Serve(ctx, ln)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	log.Info("api stopped")
	return err
}

// serveMetrics serves the API's /metrics on addr (METRICS_ADDR) until ctx
// ends, for deployments that keep them off the public address.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("api: listen for metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server", "err", err)
		}
	}()
	log.Info("api metrics listening", "addr", ln.Addr().String())
	return nil
}

// serveMonitoring serves Asynqmon at /monitoring on addr (MONITORING_ADDR)
// until ctx ends, to admins only as on the public address.
func (s *Server) serveMonitoring(ctx context.Context, addr string, mon *asynqmon.HTTPHandler, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("api: listen for monitoring: %w", err)
	}
	app := fiber.New(fiber.Config{
		AppName: "holdfast monitoring", ErrorHandler: s.errorHandler, DisableStartupMessage: true,
		ReadTimeout: 60 * time.Second, WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second,
	})
	app.Use("/monitoring", s.adminOnly, adaptor.HTTPHandler(mon))
	app.Use(func(*fiber.Ctx) error { return fiber.ErrNotFound })
	go func() {
		<-ctx.Done()
		_ = app.Shutdown()
	}()
	go func() {
		if err := app.Listener(ln); err != nil {
			log.Warn("monitoring server", "err", err)
		}
	}()
	log.Info("api monitoring listening", "addr", ln.Addr().String())
	return nil
}
