// Package testenv gives tests isolated real infrastructure: a fresh Postgres
// schema with migrations applied, a Redis logical database of their own (or a
// private redis-server, or a private three-master Redis Cluster), and a
// running API and worker on free ports.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/storage"
)

// Env vars that point tests at other servers than the local defaults.
const (
	envPG    = "HOLDFAST_TEST_POSTGRES" // server URL without database, default postgres://postgres@127.0.0.1:5432
	envRedis = "HOLDFAST_TEST_REDIS"    // host:port, default 127.0.0.1:6379
)

// PGServerURL is the shared Postgres server's URL, without a database.
func PGServerURL() string { return pgServer() }

func pgServer() string {
	if v := os.Getenv(envPG); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432"
}

func redisAddr() string {
	if v := os.Getenv(envRedis); v != "" {
		return v
	}
	return "127.0.0.1:6379"
}

func randomName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Postgres creates a schema of its own in database holdfast_test, migrates
// it, and returns a DATABASE_URL whose search_path selects it, plus a pool.
// The schema is dropped when the test ends.
func Postgres(t testing.TB) (string, *pgxpool.Pool) {
	t.Helper()
	return PostgresOn(t, pgServer())
}

// PostgresOn is Postgres on another server (a PGServer's URL).
func PostgresOn(t testing.TB, server string) (string, *pgxpool.Pool) {
	t.Helper()
	url := EmptySchemaOn(t, server)
	pool, err := storage.OpenPostgres(context.Background(), url, 4)
	require.NoError(t, err)
	t.Cleanup(pool.Close) // before the schema is dropped: cleanups run last first
	require.NoError(t, storage.Migrate(context.Background(), pool))
	return url, pool
}

// Pool opens a pool of four on url, closed when the test ends.
func Pool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := storage.OpenPostgres(context.Background(), url, 4)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// EmptySchemaOn creates a schema of its own in database holdfast_test of
// server, not migrated, and returns a DATABASE_URL whose search_path
// selects it. The schema is dropped when the test ends.
func EmptySchemaOn(t testing.TB, server string) string {
	t.Helper()
	admin := adminOf(t, server)
	schema := "t_" + randomName()
	_, err := admin.Exec(context.Background(), "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	return server + "/holdfast_test?sslmode=disable&search_path=" + schema + "%2Cpublic"
}

// admins are this process's pools on each server's holdfast_test database,
// which create and drop the tests' schemas: one per server, of two
// connections, for the life of the test binary (a pool a test opened for
// itself held one more connection for the whole test).
var admins sync.Map // server → *admin

type admin struct {
	once sync.Once
	pool *pgxpool.Pool
	err  error
}

// catalogs are those a schema's tables, indexes, sequences, constraints
// and functions leave rows in.
const catalogs = "pg_catalog.pg_class, pg_catalog.pg_attribute, pg_catalog.pg_type, pg_catalog.pg_depend, " +
	"pg_catalog.pg_index, pg_catalog.pg_constraint, pg_catalog.pg_attrdef, pg_catalog.pg_sequence, " +
	"pg_catalog.pg_namespace, pg_catalog.pg_proc, pg_catalog.pg_trigger, pg_catalog.pg_statistic"

func adminOf(t testing.TB, server string) *pgxpool.Pool {
	t.Helper()
	v, _ := admins.LoadOrStore(server, &admin{})
	a := v.(*admin)
	a.once.Do(func() { a.pool, a.err = openAdmin(server) })
	require.NoError(t, a.err)
	return a.pool
}

func openAdmin(server string) (*pgxpool.Pool, error) {
	ctx := context.Background()
	base := server + "/holdfast_test?sslmode=disable"
	if err := storage.EnsureDatabase(ctx, base); err != nil {
		return nil, err
	}
	pool, err := storage.OpenPostgres(ctx, base, 2)
	if err != nil {
		return nil, err
	}
	// Extensions live in public, created once (concurrent CREATE EXTENSION
	// races); each test's search_path ends with public to find them.
	if _, err := pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS btree_gist SCHEMA public"); err != nil {
		var exists int
		if qerr := pool.QueryRow(ctx, "SELECT count(*) FROM pg_extension WHERE extname = 'btree_gist'").Scan(&exists); qerr != nil || exists != 1 {
			pool.Close()
			return nil, err
		}
	}
	// Each test's schema leaves its 23 tables' rows in the catalogs dead
	// when dropped: about a million in pg_attribute, 200 MB, per four runs
	// of make test. A Postgres without autovacuum (as on this machine)
	// keeps them all, so each test binary vacuums the catalogs once: 0.1 s
	// when clean, 1.6 s after four runs. SKIP_LOCKED: one running elsewhere
	// does it already.
	if _, err := pool.Exec(ctx, "VACUUM (SKIP_LOCKED) "+catalogs); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// Redis reserves one of Redis' logical databases 1–15 for the test (Asynq's
// key names are fixed, so tests cannot share one), flushes it, and returns
// its REDIS_URL and a client.
func Redis(t testing.TB) (string, redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	db := Slot(t, "testdb", 15)
	url := fmt.Sprintf("redis://%s/%d", redisAddr(), db)
	c, err := storage.OpenRedis(ctx, config.Redis{URL: url})
	require.NoError(t, err)
	require.NoError(t, c.FlushDB(ctx).Err())
	t.Cleanup(func() {
		_ = c.FlushDB(context.Background()).Err()
		_ = c.Close()
	})
	return url, c
}

// Slot reserves one of n slots called name, 1 to n, among the tests of
// every test process on this machine, waiting up to ten minutes for one
// to be free; the test keeps it until it ends. Reservations are keys
// "holdfast:{name}:{slot}" in Redis database 0, which lapse after 15
// minutes should a test process die holding one.
func Slot(t testing.TB, name string, n int) int {
	t.Helper()
	ctx := context.Background()
	lock := redis.NewClient(&redis.Options{Addr: redisAddr()})
	owner := randomName()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		for slot := 1; slot <= n; slot++ {
			k := "holdfast:" + name + ":" + strconv.Itoa(slot)
			ok, err := lock.SetNX(ctx, k, owner, 15*time.Minute).Result()
			require.NoError(t, err)
			if !ok {
				continue
			}
			t.Cleanup(func() {
				if v, _ := lock.Get(context.Background(), k).Result(); v == owner {
					lock.Del(context.Background(), k)
				}
				_ = lock.Close()
			})
			return slot
		}
		require.True(t, time.Now().Before(deadline), "no free %s slot of %d", name, n)
		time.Sleep(100 * time.Millisecond)
	}
}

// RedisServer starts a private redis-server on a free loopback port (for
// tests that FLUSHALL or stop Redis), keeping nothing on disk, and returns
// its URL and a client.
func RedisServer(t testing.TB, extraArgs ...string) (string, redis.UniversalClient) {
	t.Helper()
	return startRedis(t, append([]string{"--save", "", "--appendonly", "no"}, extraArgs...)...)
}

// RedisServerWithConfig starts a private redis-server from a configuration
// file (port, bind and data directory overridden for the test).
func RedisServerWithConfig(t testing.TB, conf string) (string, redis.UniversalClient) {
	t.Helper()
	return startRedis(t, conf)
}

// startRedis runs redis-server with args, then a free loopback port and a
// temporary directory, and waits until it answers.
func startRedis(t testing.TB, args ...string) (string, redis.UniversalClient) {
	t.Helper()
	port := FreePort(t)
	spawnRedis(t, append(args, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", t.TempDir())...)
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	var c redis.UniversalClient
	require.Eventually(t, func() bool {
		var err error
		c, err = storage.OpenRedis(context.Background(), config.Redis{URL: url})
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	t.Cleanup(func() { _ = c.Close() })
	return url, c
}

// spawnRedis starts a redis-server process that is killed when the test ends.
func spawnRedis(t testing.TB, args ...string) {
	t.Helper()
	cmd := exec.Command("redis-server", args...)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
}

// RedisCluster starts a private Redis Cluster of three masters (no
// replicas) on free loopback ports, keeping nothing on disk, and returns the
// node addresses (REDIS_CLUSTER_ADDRS) and a cluster client. The slots are
// split over the three nodes by redis-cli --cluster create, so keys of
// different hash tags land on different nodes and a script or MULTI whose keys
// span slots fails with CROSSSLOT, as in production. A cluster has only
// database 0: each test gets a cluster of its own instead of a database.
func RedisCluster(t testing.TB) ([]string, *redis.ClusterClient) {
	t.Helper()
	const masters = 3
	// Each node needs a client port and a cluster bus port; fixing the bus
	// port (instead of Redis' port+10000) keeps both free and in range.
	ports := freePorts(t, 2*masters)
	dir := t.TempDir()
	addrs := make([]string, masters)
	for i := range masters {
		port, bus := strconv.Itoa(ports[2*i]), strconv.Itoa(ports[2*i+1])
		spawnRedis(t, "--port", port, "--cluster-port", bus, "--bind", "127.0.0.1", "--dir", dir,
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes-"+port+".conf"),
			"--save", "", "--appendonly", "no", "--daemonize", "no")
		addrs[i] = "127.0.0.1:" + port
	}
	ctx := context.Background()
	nodes := make([]*redis.Client, masters)
	for i, a := range addrs {
		nodes[i] = redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = nodes[i].Close() })
		require.Eventually(t, func() bool { return nodes[i].Ping(ctx).Err() == nil }, 10*time.Second, 20*time.Millisecond, "node %s", a)
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster create: %s", out)
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			info, err := n.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "cluster_state:ok on every node")
	c, err := storage.OpenRedis(ctx, config.Redis{ClusterAddrs: addrs})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return addrs, c.(*redis.ClusterClient)
}

// RedisSentinel starts a private primary and one Sentinel monitoring it as
// master (both redis-server processes, nothing on disk) and returns the
// selection that reaches the primary through the Sentinel.
func RedisSentinel(t testing.TB, master string) config.Redis {
	t.Helper()
	ports := freePorts(t, 2)
	primary, sentinel := strconv.Itoa(ports[0]), strconv.Itoa(ports[1])
	dir := t.TempDir()
	spawnRedis(t, "--port", primary, "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no")
	// Sentinel rewrites its configuration file, so it gets one of its own.
	conf := filepath.Join(dir, "sentinel.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf("port %s\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %s 1\n",
		sentinel, dir, master, primary)), 0o600))
	spawnRedis(t, conf, "--sentinel")
	sc := redis.NewSentinelClient(&redis.Options{Addr: "127.0.0.1:" + sentinel})
	defer sc.Close()
	require.Eventually(t, func() bool {
		addr, err := sc.GetMasterAddrByName(context.Background(), master).Result()
		return err == nil && len(addr) == 2 && addr[1] == primary
	}, 10*time.Second, 20*time.Millisecond, "sentinel knows the primary")
	return config.Redis{SentinelAddrs: []string{"127.0.0.1:" + sentinel}, SentinelMaster: master}
}

// HashSlot is the Redis Cluster slot of key: CRC16 (XMODEM) of its hash tag
// — the part between the first "{" and the next "}", when not empty — or of
// the whole key, modulo 16384. go-redis keeps its own copy internal; tests
// check this one against CLUSTER KEYSLOT.
func HashSlot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago (all listeners are held until the last is taken).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// Serve runs serve on a free loopback port until the test ends and returns
// its URL. At the end, each of beforeStop runs first (closing a client's
// idle connections, which would hold a graceful shutdown up), then serve's
// context ends and serve must return nil.
func Serve(t testing.TB, serve func(context.Context, net.Listener) error, beforeStop ...func()) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serve(ctx, ln) }()
	t.Cleanup(func() {
		for _, f := range beforeStop {
			f()
		}
		cancel()
		require.NoError(t, <-served)
	})
	return "http://" + ln.Addr().String()
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Config is a configuration for tests: the given stores, fast recovery
// timings, the default caps and any overrides.
func Config(t testing.TB, pgURL, redisURL string, overrides ...string) config.Config {
	t.Helper()
	vars := baseVars(pgURL, redisURL)
	require.Zero(t, len(overrides)%2, "overrides are name, value pairs")
	for i := 0; i < len(overrides); i += 2 {
		vars[overrides[i]] = overrides[i+1]
	}
	cfg, err := config.FromMap(vars)
	require.NoError(t, err)
	return cfg
}

// baseVars are the settings every test system shares; redisURL may be
// empty when the overrides select a cluster instead.
func baseVars(pgURL, redisURL string) map[string]string {
	vars := map[string]string{
		"DATABASE_URL":       pgURL,
		"JWT_SECRET":         Secret,
		"LEASE_TTL":          "2s",
		"RECONCILE_INTERVAL": "1s",
		"REDRIVE_AFTER":      "1s",
		"SHUTDOWN_TIMEOUT":   "10s",
		// A test that stops an API waits for nothing to drain from
		// (TestAnAPIToldToStopDrainsFirst sets its own).
		"SHUTDOWN_DRAIN_DELAY": "0s",
		"LOG_LEVEL":            "warn",
		"HOLDFAST_PROBE":       "true",
		"PG_MAX_CONNS":         "6", // many systems run at once; Postgres allows 100 connections
		// No default port: a test beside `make run` (8080, 8081) or another
		// test listens where the system picks.
		"HTTP_ADDR":   "127.0.0.1:0",
		"WORKER_ADDR": "127.0.0.1:0",
	}
	if redisURL != "" {
		vars["REDIS_URL"] = redisURL
	}
	if SpeedupsOff() {
		for k, v := range speedupsOff {
			vars[k] = v
		}
		// Without group commit each write holds a connection of its own
		// for its INSERT: a race of a hundred writers needs more of them,
		// and queues for them longer than the 2 s default on a busy machine
		// (TestFCFS100UsersFor50Seats was answered 503 beside two CPU
		// hogs). The speed-ups-off run checks what is applied, not how fast.
		vars["PG_MAX_CONNS"] = "8"
		vars["DEPENDENCY_TIMEOUT"] = "30s"
	}
	return vars
}

// Secret is the JWT secret of test configurations.
const Secret = "holdfast-test-secret-0123456789abcdef"

// Vars is the environment form of Config, for worker processes.
func Vars(pgURL, redisURL string, overrides ...string) map[string]string {
	vars := baseVars(pgURL, redisURL)
	for i := 0; i+1 < len(overrides); i += 2 {
		vars[overrides[i]] = overrides[i+1]
	}
	return vars
}
