// Package testenv gives tests isolated real infrastructure: a fresh Postgres
// schema with migrations applied, a Redis logical database of their own (or a
// private redis-server), and a running API and worker on free ports.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
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
	ctx := context.Background()
	base := pgServer() + "/holdfast_test?sslmode=disable"
	require.NoError(t, storage.EnsureDatabase(ctx, base))
	admin, err := storage.OpenPostgres(ctx, base, 2)
	require.NoError(t, err)
	// Extensions live in public, created once (concurrent CREATE EXTENSION
	// races); each test's search_path ends with public to find them.
	if _, err := admin.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS btree_gist SCHEMA public"); err != nil {
		var exists int
		require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_extension WHERE extname = 'btree_gist'").Scan(&exists), err.Error())
		require.Equal(t, 1, exists, err.Error())
	}
	schema := "t_" + randomName()
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	url := base + "&search_path=" + schema + "%2Cpublic"
	pool, err := storage.OpenPostgres(ctx, url, 4)
	require.NoError(t, err)
	require.NoError(t, storage.Migrate(ctx, pool))
	t.Cleanup(func() {
		pool.Close()
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		admin.Close()
	})
	return url, pool
}

// Redis reserves one of Redis' logical databases 1–15 for the test (Asynq's
// key names are fixed, so tests cannot share one), flushes it, and returns
// its REDIS_URL and a client. Reservations are keys in database 0.
func Redis(t testing.TB) (string, redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	lock := redis.NewClient(&redis.Options{Addr: redisAddr()})
	owner := randomName()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		for db := 1; db <= 15; db++ {
			k := "holdfast:testdb:" + strconv.Itoa(db)
			ok, err := lock.SetNX(ctx, k, owner, 15*time.Minute).Result()
			require.NoError(t, err)
			if !ok {
				continue
			}
			url := fmt.Sprintf("redis://%s/%d", redisAddr(), db)
			c, err := storage.OpenRedis(ctx, url)
			require.NoError(t, err)
			require.NoError(t, c.FlushDB(ctx).Err())
			t.Cleanup(func() {
				_ = c.FlushDB(context.Background()).Err()
				_ = c.Close()
				if v, _ := lock.Get(context.Background(), k).Result(); v == owner {
					lock.Del(context.Background(), k)
				}
				_ = lock.Close()
			})
			return url, c
		}
		require.True(t, time.Now().Before(deadline), "no free Redis test database")
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
	args = append(args, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", t.TempDir())
	cmd := exec.Command("redis-server", args...)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	var c redis.UniversalClient
	require.Eventually(t, func() bool {
		var err error
		c, err = storage.OpenRedis(context.Background(), url)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	t.Cleanup(func() { _ = c.Close() })
	return url, c
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

func baseVars(pgURL, redisURL string) map[string]string {
	return map[string]string{
		"DATABASE_URL":       pgURL,
		"REDIS_URL":          redisURL,
		"JWT_SECRET":         Secret,
		"LEASE_TTL":          "2s",
		"RECONCILE_INTERVAL": "1s",
		"REDRIVE_AFTER":      "1s",
		"SHUTDOWN_TIMEOUT":   "10s",
		"LOG_LEVEL":          "warn",
		"HOLDFAST_PROBE":     "true",
		"PG_MAX_CONNS":       "6", // many systems run at once; Postgres allows 100 connections
	}
}

// Secret is the JWT secret of test configurations.
const Secret = "holdfast-test-secret-0123456789"

// Vars is the environment form of Config, for worker processes.
func Vars(pgURL, redisURL string, overrides ...string) map[string]string {
	vars := baseVars(pgURL, redisURL)
	for i := 0; i+1 < len(overrides); i += 2 {
		vars[overrides[i]] = overrides[i+1]
	}
	return vars
}
