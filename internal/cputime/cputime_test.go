package cputime

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"github.com/stretchr/testify/require"
)

// Spinning for a while shows up in both counters, and the machine's busy
// time includes this process's own.
func TestSinceCountsOwnWork(t *testing.T) {
	start, err := Now()
	require.NoError(t, err)
	n := spin(t, 300*time.Millisecond)
	d, err := start.Since()
	require.NoError(t, err)
	t.Logf("spun %d times: self %.2fs, machine %.2fs", n, d.Self, d.Machine)
	require.Greater(t, d.Self, 0.1)
	require.GreaterOrEqual(t, d.Machine, d.Self-0.05) // both tick at 1/100 s
}

// The test binary finds itself by its command name and no process by a
// name nothing runs under.
func TestProcsFindsThisProcess(t *testing.T) {
	self, err := procfs.Self()
	require.NoError(t, err)
	st, err := self.Stat()
	require.NoError(t, err)
	got, err := procs(st.Comm, "holdfast-no-such-process")
	require.NoError(t, err)
	names := map[string]bool{}
	for _, p := range got {
		names[p.Name] = true
	}
	require.True(t, names[st.Comm])
	require.False(t, names["holdfast-no-such-process"])
}

// burner starts a shell that spins under command name name until killed.
func burner(t *testing.T, name string) *exec.Cmd {
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	link := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.Symlink(sh, link))
	cmd := exec.Command(link, "-c", "while :; do :; done")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// spin keeps this process busy until it has used d of CPU time more, by
// getrusage's count rather than the clock: on a loaded machine a
// wall-clock spin may get a fraction of a core. It returns the loop count.
func spin(t *testing.T, d time.Duration) int {
	t.Helper()
	used := func() time.Duration {
		var ru syscall.Rusage
		require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	n := 0
	deadline := time.Now().Add(time.Minute)
	for start := used(); used()-start < d; {
		require.True(t, time.Now().Before(deadline), "no %s of CPU within a minute", d)
		for range 1 << 16 {
			n++
		}
	}
	return n
}

// burnFor waits until the process pid has used at least secs of CPU time
// in all: by its own count, so however busy the machine is.
func burnFor(t *testing.T, pid int, secs float64) {
	t.Helper()
	require.Eventually(t, func() bool {
		p, err := procfs.NewProc(pid)
		if err != nil {
			return false
		}
		st, err := p.Stat()
		return err == nil && st.CPUTime() >= secs
	}, time.Minute, 10*time.Millisecond, "process %d should use %.1f s of CPU", pid, secs)
}

// A server process that exits between two readings takes its time with it
// instead of making the figure negative, and one that starts between them
// counts in full.
func TestSpentSurvivesProcessesComingAndGoing(t *testing.T) {
	gone := burner(t, "hfburn-gone")
	burnFor(t, gone.Process.Pid, 0.3)
	was, err := procs("hfburn-gone", "hfburn-new")
	require.NoError(t, err)
	require.NoError(t, gone.Process.Kill())
	_ = gone.Wait()
	fresh := burner(t, "hfburn-new")
	burnFor(t, fresh.Process.Pid, 0.3)
	now, err := procs("hfburn-gone", "hfburn-new")
	require.NoError(t, err)

	byName := spent(was, now)
	t.Logf("spent: %v", byName)
	require.Contains(t, byName, "hfburn-gone", "present at the start")
	require.Zero(t, byName["hfburn-gone"])
	require.Greater(t, byName["hfburn-new"], 0.1)

	// The sum of each name's readings, as the Meter used to subtract them,
	// goes negative for the process that exited: the control.
	sum := func(ps map[procID]proc, name string) float64 {
		total := 0.0
		for _, p := range ps {
			if p.Name == name {
				total += p.Seconds
			}
		}
		return total
	}
	require.Less(t, sum(now, "hfburn-gone")-sum(was, "hfburn-gone"), -0.1)
}

// A Meter reports the machine's total, this process under its part name, a
// server process found by command name (here the test binary itself) and
// the parts the caller measured, and the rest is the total minus them all.
func TestMeterReportsPartsAndRest(t *testing.T) {
	self, err := procfs.Self()
	require.NoError(t, err)
	st, err := self.Stat()
	require.NoError(t, err)
	m := Start("me", map[string]string{st.Comm: "server", "holdfast-no-such-process": "ghost"})
	spin(t, 300*time.Millisecond)
	got := m.Stop(map[string]float64{"scraped": 0.05})
	require.Greater(t, got["me"], 0.1)
	require.InDelta(t, got["me"], got["server"], 0.05, "the same process, read two ways")
	require.Equal(t, 0.05, got["scraped"])
	require.NotContains(t, got, "ghost", "a server not running is left out")
	want := max(got[Total]-got["me"]-got["server"]-got["scraped"], 0)
	require.InDelta(t, want, got[Rest], 0.02)
}
