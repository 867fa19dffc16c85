// Package config reads holdfast's settings from the environment. Each binary
// calls Load once in main and passes the values down; nothing below main
// reads the environment.
package config

import (
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
)

// Config is every setting of both binaries. The configuration table in docs/configuration.md
// lists the same names and defaults.
type Config struct {
	DatabaseURL string `env:"DATABASE_URL" envDefault:"postgres://postgres@127.0.0.1:5432/holdfast?sslmode=disable"`
	Redis       Redis
	HTTPAddr    string `env:"HTTP_ADDR" envDefault:"127.0.0.1:8080"`
	WorkerAddr  string `env:"WORKER_ADDR" envDefault:"127.0.0.1:8081"`
	// JWTSecret signs and checks holdfast's own tokens, and bearer tokens
	// unless IdentityProvider is on. It has no default: a deployment that
	// forgot it refuses to start (make run makes one).
	JWTSecret string `env:"JWT_SECRET"`
	// JWTSecretPrevious is the secret a rotation replaces: tokens signed
	// with it are still accepted (never issued) until it is removed.
	JWTSecretPrevious string `env:"JWT_SECRET_PREVIOUS"`
	LogLevel          string `env:"LOG_LEVEL" envDefault:"info"`
	PGMaxConns        int32  `env:"PG_MAX_CONNS" envDefault:"20"`
	// PGIdleTimeout closes a pooled Postgres connection idle this long.
	PGIdleTimeout time.Duration `env:"PG_IDLE_TIMEOUT" envDefault:"1m"`
	PprofAddr     string        `env:"PPROF_ADDR"` // empty: no profiling endpoint
	// MetricsAddr, when set, moves the API's /metrics off its public
	// address to this one (the worker's are on WORKER_ADDR anyway).
	MetricsAddr string `env:"METRICS_ADDR"`
	// MonitoringAddr says where Asynqmon is served, always to admins
	// only: empty, at /monitoring on HTTP_ADDR; "off", nowhere; an
	// address, at /monitoring there and not on HTTP_ADDR (a private port).
	MonitoringAddr string `env:"MONITORING_ADDR"`
	// PrometheusURL is the Prometheus that scrapes the API's Asynq queue
	// metrics; set, Asynqmon at /monitoring shows its Metrics tab, which
	// the API fills by querying it. Empty: no Metrics tab.
	PrometheusURL string `env:"PROMETHEUS_URL"`

	// API
	BodyLimit   int           `env:"BODY_LIMIT" envDefault:"65536"`
	PollMaxWait time.Duration `env:"POLL_MAX_WAIT" envDefault:"30s"`
	// DependencyTimeout bounds how long an API answer waits on Postgres or
	// Redis (a slow query, a full pool): past it the client gets 503
	// UNAVAILABLE with Retry-After. A long poll's reads are bounded each.
	DependencyTimeout time.Duration `env:"DEPENDENCY_TIMEOUT" envDefault:"2s"`
	QueueCap          int           `env:"QUEUE_CAP" envDefault:"1000000"`
	KeyCap            int           `env:"KEY_BACKLOG_CAP" envDefault:"200000"`
	EnableProbe       bool          `env:"HOLDFAST_PROBE" envDefault:"false"`
	// RateLimitPerIP and RateLimitPerUser are requests per second; 0 turns a limit off.
	RateLimitPerIP   float64 `env:"RATE_LIMIT_PER_IP" envDefault:"20000"`
	RateLimitPerUser float64 `env:"RATE_LIMIT_PER_USER" envDefault:"20"`
	// TrustedProxies are the load balancers (IPs or CIDR ranges) whose
	// X-Forwarded-For names the client; from anyone else it is ignored.
	TrustedProxies []string `env:"TRUSTED_PROXIES" envSeparator:","`
	// IdentityProvider (JWT_JWKS_URL and the rest, config/provider.go)
	// verifies bearer tokens signed by the organisation's identity provider.
	IdentityProvider IdentityProvider

	// Stays
	HoldTTL      time.Duration `env:"HOLD_TTL" envDefault:"10m"`
	HoldLockWait time.Duration `env:"HOLD_LOCK_WAIT" envDefault:"5s"`
	// HoldWritesTogether decides a batch's hold creates, confirms and
	// cancels in one pass (a keyed family) instead of one pass per run of
	// one type.
	HoldWritesTogether bool `env:"HOLD_WRITES_TOGETHER" envDefault:"true"`

	// Shop
	ReservationTTL time.Duration `env:"RESERVATION_TTL" envDefault:"30m"`
	// CartGroupRead reads the carts of concurrent reserves in one statement
	// (storage.GroupRead) instead of one each.
	CartGroupRead bool `env:"CART_GROUP_READ" envDefault:"true"`

	// Events
	DuplicateWindow time.Duration `env:"DUPLICATE_WINDOW" envDefault:"2s"`
	FCFSLockWait    time.Duration `env:"FCFS_LOCK_WAIT" envDefault:"30s"`
	EventsReconcile time.Duration `env:"EVENTS_RECONCILE_INTERVAL" envDefault:"10s"`

	// Worker
	Concurrency       int           `env:"WORKER_CONCURRENCY" envDefault:"64"`
	LeaseTTL          time.Duration `env:"LEASE_TTL" envDefault:"5s"`
	BatchMax          int           `env:"BATCH_MAX" envDefault:"256"`
	DrainSlice        time.Duration `env:"DRAIN_SLICE" envDefault:"5s"`
	ReconcileInterval time.Duration `env:"RECONCILE_INTERVAL" envDefault:"5s"`
	RedriveAfter      time.Duration `env:"REDRIVE_AFTER" envDefault:"3s"`
	// RequestRetention is how long a terminal request is kept (its outcome
	// readable, its Idempotency-Key replayed); 0 keeps them forever.
	RequestRetention time.Duration `env:"REQUEST_RETENTION" envDefault:"168h"`
	// KeyForgetAfter is how long a key's fencing state outlives its last
	// use (keyed.Options.ForgetAfter).
	KeyForgetAfter time.Duration `env:"KEY_FORGET_AFTER" envDefault:"1h"`

	// AggregateDeferred folds the tasks of requests that a drain applies
	// anyway into one Asynq task per group of up to 10,000 (keyed's
	// deferred.go); false schedules each to run by itself a minute later.
	// The API enqueues one way or the other; every worker folds.
	AggregateDeferred bool `env:"AGGREGATE_DEFERRED_TASKS" envDefault:"true"`
	// GroupCommit makes the writes that arrive together durable in one
	// INSERT and commit (requests/group.go); false stores each by itself.
	GroupCommit bool `env:"GROUP_COMMIT" envDefault:"true"`
	// BatchEnqueue sends the Asynq enqueues of concurrent writes to Redis
	// in one pipeline (storage/batch.go); false sends each by itself.
	BatchEnqueue bool `env:"BATCH_ENQUEUE" envDefault:"true"`
	// AnnouncedViews lets a long poll answer with the outcome the worker
	// announced (api/notify.go); false reads it from Postgres once
	// woken. Either way the announcement wakes the poll.
	AnnouncedViews bool `env:"ANNOUNCED_VIEWS" envDefault:"true"`

	// QuietWaiting lets a drain that waits for keys other drains hold look
	// again with Redis alone while nothing changes, and wakes it as soon as
	// a drain of its process yields it a key (keyed's waiting.go); false
	// makes every look a whole step, every few milliseconds.
	QuietWaiting bool `env:"QUIET_WAITING" envDefault:"true"`

	// MigrateOnStart has each binary apply the pending migrations when it
	// starts; false makes it refuse to start while one is missing, so that
	// a migration Job (`api migrate`) is the only migrator (storage.Schema
	// states the rule for two releases on one schema).
	MigrateOnStart bool `env:"MIGRATE_ON_START" envDefault:"true"`

	ShutdownTimeout time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"20s"`
	// ShutdownDrainDelay is how long an API told to stop (SIGTERM) goes on
	// serving before it closes its listener, /readyz answering 503 and
	// every answer closing its connection meanwhile, so that a load
	// balancer and keep-alive clients move to other APIs first.
	ShutdownDrainDelay time.Duration `env:"SHUTDOWN_DRAIN_DELAY" envDefault:"5s"`
}

// DefaultRedisURL is the Redis used when no topology is configured.
const DefaultRedisURL = "redis://127.0.0.1:6379/0"

// Redis selects the Redis deployment: one node (REDIS_URL), a Redis Cluster
// (REDIS_CLUSTER_ADDRS) or a Sentinel-managed primary (REDIS_SENTINEL_ADDRS
// and REDIS_SENTINEL_MASTER). At most one may be set; with none, REDIS_URL
// defaults to DefaultRedisURL. The go-redis client and Asynq's connection
// options are both built from this one value (storage.OpenRedis,
// storage.AsynqRedisOpt), so the queue and the mailboxes always share it.
type Redis struct {
	URL            string   `env:"REDIS_URL"`
	ClusterAddrs   []string `env:"REDIS_CLUSTER_ADDRS" envSeparator:","`
	SentinelAddrs  []string `env:"REDIS_SENTINEL_ADDRS" envSeparator:","`
	SentinelMaster string   `env:"REDIS_SENTINEL_MASTER"`
	// Credentials of the cluster nodes or of the sentinel-managed primary and
	// replicas; a single node takes them in REDIS_URL.
	Username string `env:"REDIS_USERNAME"`
	Password string `env:"REDIS_PASSWORD"`
	// SentinelPassword authenticates to the sentinels themselves.
	SentinelPassword string `env:"REDIS_SENTINEL_PASSWORD"`
}

// Topology names the deployment kind: "single", "cluster" or "sentinel".
func (r Redis) Topology() string {
	switch {
	case len(r.ClusterAddrs) > 0:
		return "cluster"
	case len(r.SentinelAddrs) > 0:
		return "sentinel"
	default:
		return "single"
	}
}

// withDefault trims the address lists ("a:1, b:2" is two addresses) and
// fills REDIS_URL when no topology was chosen. It runs before Validate, so an
// explicit REDIS_URL next to cluster or sentinel addresses is still reported
// as a conflict.
func (r Redis) withDefault() Redis {
	trim := func(addrs []string) []string {
		out := make([]string, len(addrs))
		for i, a := range addrs {
			out[i] = strings.TrimSpace(a)
		}
		return out
	}
	r.ClusterAddrs, r.SentinelAddrs = trim(r.ClusterAddrs), trim(r.SentinelAddrs)
	if r.URL == "" && len(r.ClusterAddrs) == 0 && len(r.SentinelAddrs) == 0 && r.SentinelMaster == "" {
		r.URL = DefaultRedisURL
	}
	return r
}

// Validate rejects a Redis selection that is ambiguous or incomplete.
func (r Redis) Validate() error {
	var set []string
	if r.URL != "" {
		set = append(set, "REDIS_URL")
	}
	if len(r.ClusterAddrs) > 0 {
		set = append(set, "REDIS_CLUSTER_ADDRS")
	}
	if len(r.SentinelAddrs) > 0 {
		set = append(set, "REDIS_SENTINEL_ADDRS")
	}
	for _, addrs := range [][]string{r.ClusterAddrs, r.SentinelAddrs} {
		for _, a := range addrs {
			if strings.TrimSpace(a) == "" {
				return fmt.Errorf("config: empty address in REDIS_CLUSTER_ADDRS or REDIS_SENTINEL_ADDRS")
			}
		}
	}
	switch {
	case len(set) > 1:
		return fmt.Errorf("config: %s are set together; choose one Redis topology", strings.Join(set, " and "))
	case r.SentinelMaster != "" && len(r.SentinelAddrs) == 0:
		return fmt.Errorf("config: REDIS_SENTINEL_MASTER needs REDIS_SENTINEL_ADDRS")
	case len(r.SentinelAddrs) > 0 && r.SentinelMaster == "":
		return fmt.Errorf("config: REDIS_SENTINEL_ADDRS needs REDIS_SENTINEL_MASTER (the monitored primary's name)")
	case len(set) == 0:
		return fmt.Errorf("config: no Redis configured: set REDIS_URL, REDIS_CLUSTER_ADDRS or REDIS_SENTINEL_ADDRS")
	case r.URL != "" && (r.Username != "" || r.Password != ""):
		return fmt.Errorf("config: REDIS_USERNAME and REDIS_PASSWORD apply to a cluster or sentinel; put a single node's credentials in REDIS_URL")
	case r.SentinelPassword != "" && len(r.SentinelAddrs) == 0:
		return fmt.Errorf("config: REDIS_SENTINEL_PASSWORD needs REDIS_SENTINEL_ADDRS")
	}
	return nil
}

// Load parses the environment.
func Load() (Config, error) {
	c, err := env.ParseAs[Config]()
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c.Redis = c.Redis.withDefault()
	return c, c.Validate()
}

// FromMap parses settings from vars instead of the environment, with the
// same names and defaults (tests use it so they can run in parallel).
func FromMap(vars map[string]string) (Config, error) {
	c, err := env.ParseAsWithOptions[Config](env.Options{Environment: vars})
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	c.Redis = c.Redis.withDefault()
	return c, c.Validate()
}

// Validate rejects settings that cannot work.
func (c Config) Validate() error {
	if err := c.Redis.Validate(); err != nil {
		return err
	}
	if err := c.IdentityProvider.Validate(); err != nil {
		return err
	}
	switch {
	case c.BodyLimit < 1024:
		return fmt.Errorf("config: BODY_LIMIT must be at least 1024 bytes")
	case c.DependencyTimeout < 100*time.Millisecond:
		return fmt.Errorf("config: DEPENDENCY_TIMEOUT must be at least 100ms")
	case c.PGIdleTimeout < time.Second:
		return fmt.Errorf("config: PG_IDLE_TIMEOUT must be at least 1s")
	case c.PGMaxConns < 2:
		return fmt.Errorf("config: PG_MAX_CONNS must be at least 2")
	case c.Concurrency < 1:
		return fmt.Errorf("config: WORKER_CONCURRENCY must be positive")
	case c.BatchMax < 1:
		return fmt.Errorf("config: BATCH_MAX must be positive")
	case c.LeaseTTL < 100*time.Millisecond:
		return fmt.Errorf("config: LEASE_TTL must be at least 100ms")
	case c.KeyForgetAfter < 10*c.LeaseTTL || c.KeyForgetAfter < 2*c.DrainSlice:
		return fmt.Errorf("config: KEY_FORGET_AFTER must be at least 10 × LEASE_TTL and 2 × DRAIN_SLICE")
	case c.RequestRetention < 0:
		return fmt.Errorf("config: REQUEST_RETENTION must not be negative (0 keeps requests forever)")
	case c.ReconcileInterval < time.Second:
		return fmt.Errorf("config: RECONCILE_INTERVAL must be at least 1s")
	case c.HoldTTL < time.Second:
		return fmt.Errorf("config: HOLD_TTL must be at least 1s")
	case !(c.RateLimitPerIP >= 0 && c.RateLimitPerUser >= 0) || math.IsInf(c.RateLimitPerIP+c.RateLimitPerUser, 0):
		return fmt.Errorf("config: rate limits must be finite and not negative")
	case c.JWTSecret == "":
		return fmt.Errorf("config: JWT_SECRET is required: the secret that signs and checks every token, at least 32 random bytes (make run makes one for development)")
	case len(c.JWTSecret) < 32:
		return fmt.Errorf("config: JWT_SECRET must be at least 32 bytes")
	case c.JWTSecretPrevious != "" && len(c.JWTSecretPrevious) < 32:
		return fmt.Errorf("config: JWT_SECRET_PREVIOUS must be at least 32 bytes")
	case c.JWTSecretPrevious == c.JWTSecret:
		return fmt.Errorf("config: JWT_SECRET_PREVIOUS is the secret it was replaced by: set JWT_SECRET to the new secret")
	}
	if err := validMonitoringAddr(c.MonitoringAddr); err != nil {
		return err
	}
	return validPrometheusURL(c.PrometheusURL)
}

// MonitoringOff is the MONITORING_ADDR that turns Asynqmon off.
const MonitoringOff = "off"

// validMonitoringAddr accepts an empty MONITORING_ADDR, "off" or a
// host:port to listen on.
func validMonitoringAddr(s string) error {
	if s == "" || s == MonitoringOff {
		return nil
	}
	if _, _, err := net.SplitHostPort(s); err != nil {
		return fmt.Errorf("config: MONITORING_ADDR must be empty, %q or an address to listen on like :8082, got %q", MonitoringOff, s)
	}
	return nil
}

// validPrometheusURL accepts an empty PROMETHEUS_URL or an absolute http(s)
// URL without query or fragment, to which Asynqmon appends /api/v1/query_range.
func validPrometheusURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("config: PROMETHEUS_URL must be an http:// or https:// URL of a Prometheus server (like http://prometheus:9090), got %q", s)
	}
	return nil
}

// Logger returns a JSON slog logger at LOG_LEVEL.
func (c Config) Logger(w interface{ Write([]byte) (int, error) }) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		lvl = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl}))
}
