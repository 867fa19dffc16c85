package cputime

import (
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
	deadline := time.Now().Add(300 * time.Millisecond)
	n := 0
	for time.Now().Before(deadline) {
		n++
	}
	d, err := start.Since()
	require.NoError(t, err)
	t.Logf("spun %d times: self %.2fs, machine %.2fs", n, d.Self, d.Machine)
	require.Greater(t, d.Self, 0.1)
	require.GreaterOrEqual(t, d.Machine, d.Self-0.05) // both tick at 1/100 s
}

// The test binary finds itself by its command name and no process by a
// name nothing runs under.
func TestByNameFindsThisProcess(t *testing.T) {
	self, err := procfs.Self()
	require.NoError(t, err)
	st, err := self.Stat()
	require.NoError(t, err)
	got, err := ByName(st.Comm, "holdfast-no-such-process")
	require.NoError(t, err)
	require.Contains(t, got, st.Comm)
	require.NotContains(t, got, "holdfast-no-such-process")
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
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); {
	}
	got := m.Stop(map[string]float64{"scraped": 0.05})
	require.Greater(t, got["me"], 0.1)
	require.InDelta(t, got["me"], got["server"], 0.05, "the same process, read two ways")
	require.Equal(t, 0.05, got["scraped"])
	require.NotContains(t, got, "ghost", "a server not running is left out")
	want := max(got[Total]-got["me"]-got["server"]-got["scraped"], 0)
	require.InDelta(t, want, got[Rest], 0.02)
}
