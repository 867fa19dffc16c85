package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// PGServer is a private Postgres server on a free loopback port, for the
// fault tests that stop, start or fill Postgres; the shared server must stay
// up for every other test. Its data lives in a temporary directory without
// fsync and is removed when the test ends.
type PGServer struct {
	t    testing.TB
	dir  string
	port int
	env  []string // added to the server's environment (SkewedPostgresServer)
	// URL is the server's URL without a database, as HOLDFAST_TEST_POSTGRES.
	URL string
}

// pgBin finds one of Postgres' server programs: Debian keeps them out of
// PATH, under /usr/lib/postgresql/<version>/bin.
func pgBin(t testing.TB, name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	require.NotEmpty(t, found, "no %s: install postgresql", name)
	return found[len(found)-1]
}

// asPostgres runs a server program as the postgres user when the test runs
// as root (Postgres refuses to run as root).
func asPostgres(t testing.TB, name string, args ...string) *exec.Cmd {
	bin := pgBin(t, name)
	if os.Geteuid() != 0 {
		return exec.Command(bin, args...)
	}
	return exec.Command("runuser", append([]string{"-u", "postgres", "--", bin}, args...)...)
}

// PostgresServer initializes and starts a private server; settings are
// extra `name=value` server settings (max_connections=20).
func PostgresServer(t testing.TB, settings ...string) *PGServer {
	t.Helper()
	return postgresServer(t, nil, settings...)
}

// postgresServer is PostgresServer with env added to the server's
// environment.
func postgresServer(t testing.TB, env []string, settings ...string) *PGServer {
	t.Helper()
	dir, err := os.MkdirTemp("", "holdfast-pg-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err)
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		require.NoError(t, os.Chown(dir, uid, gid))
	}
	out, err := asPostgres(t, "initdb", "-D", filepath.Join(dir, "data"), "-U", "postgres", "-A", "trust", "--no-sync").CombinedOutput()
	require.NoError(t, err, "initdb: %s", out)
	s := &PGServer{t: t, dir: dir, port: FreePort(t), env: env}
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d", s.port)
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off", s.port, dir)
	for _, kv := range settings {
		opts += " -c " + kv
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "opts"), []byte(opts), 0o644))
	s.Start()
	t.Cleanup(func() {
		_ = asPostgres(t, "pg_ctl", "-D", filepath.Join(dir, "data"), "-m", "immediate", "-w", "stop").Run()
	})
	return s
}

// Start starts the server and waits until it accepts connections.
func (s *PGServer) Start() {
	s.t.Helper()
	opts, err := os.ReadFile(filepath.Join(s.dir, "opts"))
	require.NoError(s.t, err)
	cmd := asPostgres(s.t, "pg_ctl", "-D", filepath.Join(s.dir, "data"), "-o", string(opts),
		"-l", filepath.Join(s.dir, "log"), "-w", "-t", "60", "start")
	cmd.Env = append(os.Environ(), s.env...)
	out, err := cmd.CombinedOutput()
	require.NoError(s.t, err, "pg_ctl start: %s", out)
	require.Eventually(s.t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, s.URL+"/postgres?sslmode=disable")
		if err != nil {
			return false
		}
		_ = c.Close(ctx)
		return true
	}, 30*time.Second, 50*time.Millisecond)
}

// Stop stops the server at once (fast shutdown: sessions are ended, open
// transactions roll back), as an operator's restart or a failover does.
func (s *PGServer) Stop() {
	s.t.Helper()
	out, err := asPostgres(s.t, "pg_ctl", "-D", filepath.Join(s.dir, "data"), "-m", "fast", "-w", "stop").CombinedOutput()
	require.NoError(s.t, err, "pg_ctl stop: %s", out)
}
