// Package systest runs the real API and workers for end-to-end tests: in
// process (wiring.API, wiring.Worker on free ports) or as separate worker processes
// (the test binary re-executed), with an HTTP client that speaks the API.
package systest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/auth"
	"github.com/holdfast/holdfast/cmd/wiring"
	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/storage"
	"github.com/holdfast/holdfast/worker"
)

// Options shape a system under test.
type Options struct {
	Workers   int      // in-process workers started at once (default 0)
	NoAPI     bool     // do not start the API
	Overrides []string // config name, value pairs
	RedisURL  string   // use this Redis instead of a reserved test database
	// Postgres is the URL of a Postgres server (testenv.PGServer) to use
	// instead of the shared one; the system gets a schema of its own there.
	Postgres string
	// DatabaseURL runs the system on this database (a restored backup)
	// instead of a schema of its own; the test owns and drops it.
	DatabaseURL string
	// Redis runs the system on this Redis Cluster or Sentinel deployment
	// (testenv.RedisCluster, testenv.RedisSentinel) instead: it reaches the
	// API and every worker, in process or not, as REDIS_CLUSTER_ADDRS or
	// REDIS_SENTINEL_ADDRS and REDIS_SENTINEL_MASTER.
	Redis config.Redis
	// Unguarded runs, instead of holdfast's worker, the handler-only design
	// SPEC §3 warns against, built from the same appliers (unguarded.go):
	// the control cases that show the invariants breaking without the guard.
	Unguarded bool
	// WrapApplier, when set, stands between in-process workers' engine
	// and each write type's applier (a control case's misbehaving
	// applier).
	WrapApplier func(typeName string, a keyed.Applier) keyed.Applier
	// Rush marks a system that serves a rush of hundreds of clients: it
	// waits for the machine's one rush slot, so that no two rushes starve
	// each other and the tests beside them, and its stores may answer as
	// slowly as a machine busy with the rest of the suite makes them
	// (DEPENDENCY_TIMEOUT 30s, PG_MAX_CONNS 8): a rush test checks what
	// was applied, not how fast, and a 503 there is the machine's load.
	Rush bool
}

// System is a running holdfast: one API, any number of workers.
type System struct {
	t      testing.TB
	Cfg    config.Config
	Vars   map[string]string // the configuration as environment, for worker processes
	Pool   *pgxpool.Pool
	Redis  redis.UniversalClient
	URL    string // API base URL
	Signer *auth.Signer
	Log    *slog.Logger

	mu   sync.Mutex
	opts Options
}

// systems is how many systems the tests of every test process on this
// machine run at once (testenv.Slot): each may hold 16 Postgres
// connections and more (PG_MAX_CONNS 6 for its API and for each worker, 4
// for the test's own pool), though few fill their pools, and Postgres
// allows 100, some of them to a `make run` beside the tests.
const systems = 6

// rushes are the tests that hold the rush slot: a test that starts a
// second rush system (a control after its case) keeps the one it has.
var rushes sync.Map // testing.TB → true

// Start brings a system up; everything stops when the test ends. It waits
// for one of the machine's system slots first.
func Start(t testing.TB, opts Options) *System {
	t.Helper()
	if opts.Rush {
		if _, held := rushes.LoadOrStore(t, true); !held {
			testenv.Slot(t, "rush", 1)
			t.Cleanup(func() { rushes.Delete(t) })
		}
	}
	testenv.Slot(t, "system", systems)
	pgServer := opts.Postgres
	if pgServer == "" {
		pgServer = testenv.PGServerURL()
	}
	var pgURL string
	var pool *pgxpool.Pool
	if opts.DatabaseURL != "" {
		pgURL, pool = opts.DatabaseURL, testenv.Pool(t, opts.DatabaseURL)
	} else {
		pgURL, pool = testenv.PostgresOn(t, pgServer)
	}
	redisURL, rdb := opts.RedisURL, redis.UniversalClient(nil)
	overrides := opts.Overrides
	if opts.Rush {
		overrides = append([]string{"DEPENDENCY_TIMEOUT", "30s", "PG_MAX_CONNS", "8"}, overrides...)
	}
	if opts.Unguarded {
		// The handler-only design opens a transaction for every request it
		// runs at once, and its controls wait for six of them on a lock.
		overrides = append([]string{"PG_MAX_CONNS", "8"}, overrides...)
	}
	switch {
	case opts.Redis.Topology() != "single":
		require.Empty(t, redisURL, "RedisURL and Redis are exclusive")
		c, err := storage.OpenRedis(context.Background(), opts.Redis)
		require.NoError(t, err)
		rdb = c
		t.Cleanup(func() { _ = rdb.Close() })
		overrides = append(redisVars(opts.Redis), overrides...)
	case redisURL == "":
		redisURL, rdb = testenv.Redis(t)
	default:
		rdb = redis.NewClient(mustParseRedis(t, redisURL))
		t.Cleanup(func() { _ = rdb.Close() })
	}
	s := &System{t: t, Pool: pool, Redis: rdb, opts: opts}
	s.Cfg = testenv.Config(t, pgURL, redisURL, overrides...)
	s.Vars = testenv.Vars(pgURL, redisURL, overrides...)
	s.Signer = auth.NewSigner(s.Cfg.JWTSecret)
	s.Log = slog.New(slog.NewJSONHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if !opts.NoAPI {
		s.StartAPI()
	}
	for i := range opts.Workers {
		s.StartWorker(fmt.Sprintf("w%d", i+1))
	}
	return s
}

// redisVars is a cluster or sentinel selection as config name, value pairs.
func redisVars(r config.Redis) []string {
	if r.Topology() == "cluster" {
		return []string{"REDIS_CLUSTER_ADDRS", strings.Join(r.ClusterAddrs, ",")}
	}
	return []string{"REDIS_SENTINEL_ADDRS", strings.Join(r.SentinelAddrs, ","), "REDIS_SENTINEL_MASTER", r.SentinelMaster}
}

func mustParseRedis(t testing.TB, url string) *redis.Options {
	o, err := redis.ParseURL(url)
	require.NoError(t, err)
	return o
}

type testLogWriter struct{ t testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// StartAPI runs the API (wiring.API) on a free port and waits until it is ready; it is
// the API at s.URL.
func (s *System) StartAPI() {
	url := s.runAPI()
	s.mu.Lock()
	s.URL = url
	s.mu.Unlock()
}

// StartExtraAPI runs one more API process on the same Postgres and Redis,
// as a scaled-out deployment does, and returns its base URL (Client.At).
func (s *System) StartExtraAPI() string {
	return s.runAPI()
}

// StartStoppableAPI runs one more API, as StartExtraAPI does, and returns
// its base URL and a function that shuts it down gracefully (a restart).
func (s *System) StartStoppableAPI() (url string, stop func()) {
	return s.startAPI()
}

// runAPI runs an API until the test ends and returns its base URL.
func (s *System) runAPI() string {
	url, _ := s.startAPI()
	return url
}

// startAPI runs an API until stop is called or the test ends.
func (s *System) startAPI() (string, func()) {
	t := s.t
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&wiring.API{Config: s.Cfg, Log: s.Log, Listener: ln}).Run(ctx)
	}()
	url := "http://" + ln.Addr().String()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			// A connection the client dialled but never used would hold up
			// the server's graceful shutdown until its timeout.
			transport.CloseIdleConnections()
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Error("api did not stop")
			}
		})
	}
	t.Cleanup(stop)
	require.Eventually(t, func() bool {
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 20*time.Second, 20*time.Millisecond)
	return url, stop
}

// HoldLease holds key's lease for ttl as a holder that never applies
// anything: the key is busy, as under a slow drain, until the lease lapses
// or the returned func lets it go (as a holder ending its drain would).
func (s *System) HoldLease(key string, ttl time.Duration) (release func()) {
	ok, err := s.Redis.SetNX(context.Background(), keyed.LeaseKey(key), "1", ttl).Result()
	require.NoError(s.t, err)
	require.True(s.t, ok, "the lease of %s is free", key)
	return func() { require.NoError(s.t, s.Redis.Del(context.Background(), keyed.LeaseKey(key)).Err()) }
}

// Worker is an in-process worker.
type Worker struct {
	Name string
	URL  string // its /metrics and health
	stop func()
}

// Stop stops the worker as SIGTERM does, and waits for it.
func (w *Worker) Stop() { w.stop() }

// StartWorker runs a worker (wiring.Worker) in process.
func (s *System) StartWorker(name string) *Worker {
	t := s.t
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		if s.opts.Unguarded {
			done <- runUnguarded(ctx, s.Cfg, ln, s.modules())
			return
		}
		done <- (&wiring.Worker{Config: s.Cfg, Log: s.Log, Listener: ln, Name: name, Modules: s.modules()}).Run(ctx)
	}()
	var once sync.Once
	w := &Worker{Name: name, URL: "http://" + ln.Addr().String()}
	w.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(40 * time.Second):
				t.Error("worker did not stop")
			}
		})
	}
	t.Cleanup(w.stop)
	return w
}

// modules are every vertical's write types, each applier wrapped in
// Options.WrapApplier when that is set.
func (s *System) modules() []worker.Types {
	mods := wiring.Modules(s.Cfg)
	wrap := s.opts.WrapApplier
	if wrap == nil {
		return mods
	}
	for i, build := range mods {
		mods[i] = func(st *storage.Stores) worker.Module {
			m := build(st)
			for j, t := range m.Types {
				m.Types[j].Applier = wrap(t.Name, t.Applier)
			}
			return m
		}
	}
	return mods
}

// Process is an API or a worker running in its own OS process.
type Process struct {
	Cmd  *exec.Cmd
	done chan error
}

// StartWorkerProcess re-executes the test binary as a worker process
// (StartProcess).
func (s *System) StartWorkerProcess(name string) *Serving {
	return s.StartProcess("worker", name)
}

// Kill sends SIGKILL.
func (p *Process) Kill() error { return p.Cmd.Process.Signal(syscall.SIGKILL) }

// Terminate sends SIGTERM and waits for the exit, returning its error.
func (p *Process) Terminate(timeout time.Duration) error {
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case err := <-p.done:
		p.done <- err // let the cleanup's receive finish
		return err
	case <-time.After(timeout):
		return errors.New("worker process did not exit in time")
	}
}

// Token mints a token for sub with role.
func (s *System) Token(sub string, role domain.Role) string {
	tok, err := s.Signer.Issue(sub, role, time.Now(), time.Hour)
	require.NoError(s.t, err)
	return tok
}
