package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Frozen is a process tree stopped with SIGSTOP.
type Frozen struct {
	Pids []int
	done bool
}

// Thaw sends SIGCONT to every frozen process, once.
func (f *Frozen) Thaw() {
	if f.done {
		return
	}
	f.done = true
	for _, pid := range f.Pids {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
}

// Freeze stops the server's postmaster and every process it forked
// (backends, checkpointer, WAL writer…) with SIGSTOP, as a VM paused by its
// host or a stalled disk freezes a database: connections stay open and
// nothing answers. The test's end thaws it, if the test does not.
func (s *PGServer) Freeze() *Frozen {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dir, "data", "postmaster.pid"))
	require.NoError(s.t, err)
	postmaster, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	require.NoError(s.t, err)
	return FreezeTree(s.t, postmaster)
}

// FreezeRedis stops the Redis server rdb talks to (a private one: its
// process id comes from INFO) with SIGSTOP, as a paused VM or a partition
// that drops packets freezes it: connections stay open and nothing
// answers. The test's end thaws it, if the test does not.
func FreezeRedis(t testing.TB, rdb redis.UniversalClient) *Frozen {
	t.Helper()
	info, err := rdb.Info(context.Background(), "server").Result()
	require.NoError(t, err)
	var pid int
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err = strconv.Atoi(v)
			require.NoError(t, err)
		}
	}
	require.Positive(t, pid, "Redis' process id in INFO server")
	return FreezeTree(t, pid)
}

// FreezeTree stops root with SIGSTOP, then each of its children as /proc
// lists them (a stopped parent forks no more; the loop catches one it
// forked just before), and waits until every one is stopped.
func FreezeTree(t testing.TB, root int) *Frozen {
	t.Helper()
	f := &Frozen{Pids: []int{root}}
	t.Cleanup(f.Thaw)
	require.NoError(t, syscall.Kill(root, syscall.SIGSTOP))
	seen := map[int]bool{root: true}
	for fresh := true; fresh; {
		fresh = false
		for _, pid := range childrenOf(t, root) {
			if !seen[pid] {
				seen[pid], fresh = true, true
				if syscall.Kill(pid, syscall.SIGSTOP) == nil {
					f.Pids = append(f.Pids, pid)
				}
			}
		}
	}
	for _, pid := range f.Pids {
		waitStopped(t, pid)
	}
	return f
}

func childrenOf(t testing.TB, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var kids []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if parent, _, err := procStat(child); err == nil && parent == pid {
			kids = append(kids, child)
		}
	}
	return kids
}

// procStat reads a process's parent and state (R, S, T for stopped…) from
// /proc/<pid>/stat, whose second field, the command in parentheses, may
// hold spaces: the fields after its closing parenthesis are counted.
func procStat(pid int) (parent int, state byte, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 2 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	parent, err = strconv.Atoi(f[1])
	return parent, f[0][0], err
}

// waitStopped waits until pid is stopped (state T), or gone.
func waitStopped(t testing.TB, pid int) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, state, err := procStat(pid)
		return err != nil || state == 'T'
	}, 10*time.Second, time.Millisecond, "process %d stopped", pid)
}
