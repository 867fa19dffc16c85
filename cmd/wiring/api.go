package wiring

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/hibiken/asynq"
	asynqmetrics "github.com/hibiken/asynq/x/metrics"
	"github.com/hibiken/asynqmon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/api"
	"github.com/holdfast/holdfast/auth"
	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/metrics"
	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/storage"
)

// API is the API binary.
type API struct {
	Config config.Config
	Log    *slog.Logger
	// Listener is where it serves; nil listens on HTTP_ADDR.
	Listener net.Listener
}

// Run connects, migrates (MIGRATE_ON_START), serves until ctx ends, drains
// for SHUTDOWN_DRAIN_DELAY, then shuts down gracefully and closes what it
// opened, in the reverse order.
func (a *API) Run(ctx context.Context) error {
	cfg, log := a.Config, a.Log
	st, err := openStores(ctx, cfg)
	if st == nil {
		return err
	}
	defer st.Close()
	// Told to stop (stopping ends), the API drains first (Server.Drain):
	// everything runs on until ctx ends, SHUTDOWN_DRAIN_DELAY later.
	stopping := ctx
	ctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	storage.ServePprof(ctx, cfg.PprofAddr, log)
	go storage.WatchPool(ctx, st.Pool, "api", storage.PoolWatchInterval, log)

	insp := asynq.NewInspectorFromRedisClient(st.Redis)
	store := requests.NewStore(st.Pool)
	reg, m := apiMetrics(st.Redis, insp, store, log)
	engine := keyed.New(st.Pool, st.Redis, insp, log, m, KeyedOptions(cfg, "api"))
	defer engine.Close()
	notifier := api.NewNotifier(st.Redis)
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
	signer := auth.NewSigner(cfg.JWTSecret).AlsoVerifying(cfg.JWTSecretPrevious)
	tokens, err := bearerTokens(ctx, cfg, signer, log)
	if err != nil {
		return err
	}
	srv := api.New(cfg, api.Deps{
		Pool: st.Pool, Redis: st.Redis, Store: store, Notifier: notifier,
		Intake: newIntake(cfg, store, engine, notifier, log), Signer: signer, Tokens: tokens,
		Registry: reg, Metrics: m, HTTP: metrics.NewHTTP(reg), Log: log, Monitoring: publicMonitoring(cfg, mon),
	}, Verticals(cfg))
	if err := srv.ServePrivate(ctx, mon); err != nil {
		return err
	}
	context.AfterFunc(stopping, func() { srv.Drain(stop) })
	return srv.ListenAndServe(ctx, cfg.HTTPAddr, a.Listener)
}

// apiMetrics is the API's metrics. The one collector of Asynq's queue
// metrics lives in the API, and so do the scrape-time reads of Redis
// memory and of the oldest open request: an API runs even when no worker
// does, which is when they matter. Its Redis client gets the breaker.
func apiMetrics(rdb redis.UniversalClient, insp *asynq.Inspector, store *requests.Store, log *slog.Logger) (*prometheus.Registry, *metrics.Pipeline) {
	reg := metrics.NewRegistry()
	m := metrics.NewPipeline(reg)
	reg.MustRegister(asynqmetrics.NewQueueMetricsCollector(insp),
		metrics.NewRedisMemory(rdb), metrics.NewOldestOpen(store), breaker(rdb, log))
	return reg, m
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

// newIntake is the API's intake, as the configuration shapes it.
func newIntake(cfg config.Config, store *requests.Store, engine *keyed.Engine, notifier *api.Notifier, log *slog.Logger) *requests.Intake {
	intake := requests.NewIntake(store, engine, log)
	intake.SetTimeout(cfg.DependencyTimeout)
	intake.CommitEach = !cfg.GroupCommit
	if cfg.AnnouncedViews {
		intake.Tracker = notifier // it keeps the views of what it tracks for them
	}
	return intake
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

// publicMonitoring is mon when it is served on HTTP_ADDR (MONITORING_ADDR
// empty), else nil (Server.ServePrivate serves it on its own address).
func publicMonitoring(cfg config.Config, mon *asynqmon.HTTPHandler) *asynqmon.HTTPHandler {
	if cfg.MonitoringAddr != "" {
		return nil
	}
	return mon
}

// bearerTokens is the api.TokenVerifier cfg asks for: with JWT_JWKS_URL set,
// the identity provider's keys, fetched in the background until they are
// (the API answering 503 meanwhile), and then HS256 bearer tokens are
// refused; else signer. Its work ends with ctx.
func bearerTokens(ctx context.Context, cfg config.Config, signer *auth.Signer, log *slog.Logger) (api.TokenVerifier, error) {
	idp := cfg.IdentityProvider
	if !idp.Enabled() {
		return signer, nil
	}
	return auth.NewProvider(ctx, auth.ProviderOptions{
		JWKSURL: idp.JWKSURL, Issuer: idp.Issuer, Audience: idp.Audience, RoleClaim: idp.RoleClaim,
		RefreshInterval: idp.RefreshInterval, MinRefreshInterval: idp.MinRefreshInterval, Log: log,
	})
}
