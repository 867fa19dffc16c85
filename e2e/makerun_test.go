package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
)

// makeRun is `make run` (scripts/run.sh) started on a private database,
// Redis and ports, with binaries built for the test.
type makeRun struct {
	cmd *exec.Cmd
	out *bufio.Scanner // its stdout and stderr
	bin string         // where its binaries and the dev secret are (BIN)
	api string         // the API's address, host:port
	db  string         // its database's URL
	env []string       // the environment it ran with
}

func startMakeRun(t *testing.T) *makeRun {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	bin := t.TempDir()
	// Built with -race, as every test binary is: the packages are then
	// compiled already (.ci/run compiles them ahead), so this only links,
	// seconds instead of minutes of compiling each dependency again on a
	// fresh machine; and the race detector watches the real binaries too.
	for _, c := range []string{"api", "worker"} {
		out, err := exec.Command("go", "build", "-race", "-buildvcs=auto", "-o", filepath.Join(bin, c), "../cmd/"+c).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	redisURL, _ := testenv.RedisServer(t)
	dbName := "holdfast_makerun_" + fmt.Sprint(time.Now().UnixNano())
	pgURL := "postgres://postgres@127.0.0.1:5432/" + dbName + "?sslmode=disable"
	t.Cleanup(func() {
		_ = exec.Command("psql", "-h", "127.0.0.1", "-U", "postgres", "-qc", "DROP DATABASE IF EXISTS "+dbName).Run()
	})
	m := &makeRun{bin: bin, api: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), db: pgURL}
	// A race found in either binary stops it, so the test fails.
	m.env = append(os.Environ(), "GORACE=halt_on_error=1", "PG_MAX_CONNS=4", "BIN="+bin, "LOG_DIR="+t.TempDir(), "DATABASE_URL="+pgURL, "REDIS_URL="+redisURL,
		"HTTP_ADDR="+m.api, fmt.Sprintf("WORKER_ADDR=127.0.0.1:%d", testenv.FreePort(t)))
	m.cmd = exec.Command("../scripts/run.sh")
	m.cmd.Env = m.env
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := m.cmd.StdoutPipe()
	require.NoError(t, err)
	m.cmd.Stderr = m.cmd.Stdout
	require.NoError(t, m.cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL) })
	m.out = bufio.NewScanner(stdout)
	return m
}

// `make run` (scripts/run.sh) starts the system, and every curl line it
// prints works when pasted into a shell; Ctrl-C stops both processes.
func TestMakeRunPrintsWorkingCurlLines(t *testing.T) {
	t.Parallel()
	m := startMakeRun(t)
	cmd, sc := m.cmd, m.out

	var exports []string
	var curls []string
	var pages []string // the waiting-room links, with a user's token in the fragment
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "export "); ok {
			exports = append(exports, v)
		}
		if strings.HasPrefix(line, "curl ") || strings.HasPrefix(line, "rid=$(curl ") {
			curls = append(curls, line)
		}
		if strings.Contains(line, "/waiting-room#token=") {
			pages = append(pages, line)
		}
		if strings.HasPrefix(line, "Press Ctrl-C") {
			break
		}
	}
	require.NotEmpty(t, exports, "make run printed no token")
	// Built as make build builds it, the API names the commit it was built
	// from on /healthz.
	if head, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		r, err := http.Get("http://" + m.api + "/healthz")
		require.NoError(t, err)
		var health struct{ Version, Revision string }
		require.NoError(t, json.NewDecoder(r.Body).Decode(&health))
		_ = r.Body.Close()
		require.Equal(t, strings.TrimSpace(string(head)), health.Revision)
		require.NotEmpty(t, health.Version)
	}
	require.GreaterOrEqual(t, len(curls), 5)
	polled := false
	for _, line := range curls {
		sh := exec.Command("bash", "-o", "pipefail", "-c", line)
		sh.Env = append(os.Environ(), exports...)
		out, err := sh.CombinedOutput()
		require.NoError(t, err, "%s\n%s", line, out)
		require.NotEmpty(t, out, line)
		if rid, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "requestId "); ok {
			// The next lines poll the request this line submitted, as they
			// would in the user's shell: not one of make run's own.
			require.Regexp(t, `^[0-9a-f-]{36}$`, rid, line)
			exports = append(exports, "rid="+rid)
			continue
		}
		if strings.Contains(line, "$rid") {
			polled = true
			require.Contains(t, string(out), exports[len(exports)-1][len("rid="):], "the poll is of the user's own request")
		}
		require.NotContains(t, string(out), `{"error":{`, line)
		if strings.Contains(line, "wait=10s") {
			require.Contains(t, string(out), `"status":"succeeded"`)
		}
		if strings.Contains(line, "-X POST") {
			require.Contains(t, string(out), `"requestId"`)
		}
	}

	require.True(t, polled, "make run printed no poll of the user's own request")

	// Two ready-to-open waiting-room links, for two different users: the
	// page loads, and its token is one the API accepts.
	require.Len(t, pages, 2, "make run prints a waiting-room link for each of two users")
	users := map[string]bool{}
	for _, link := range pages {
		page, token, ok := strings.Cut(link, "#token=")
		require.True(t, ok, link)
		resp, err := http.Get(page)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, page)
		require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html"), page)
		status := strings.Replace(page, "/events/", "/api/v1/events/", 1)
		status = strings.Replace(status, "/waiting-room", "/queue/status", 1)
		req, err := http.NewRequest("GET", status, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "the link's token: %s", status)
		users[token] = true
	}
	require.Len(t, users, 2, "the two links are two users")

	// Ctrl-C stops both cleanly.
	require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT))
	rest := make(chan string, 1)
	go func() {
		var b strings.Builder
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
		}
		rest <- b.String()
	}()
	select {
	case out := <-rest:
		require.Contains(t, out, "stopped.")
	case <-time.After(30 * time.Second):
		t.Fatal("make run did not stop on Ctrl-C")
	}
	_ = cmd.Wait()
}
