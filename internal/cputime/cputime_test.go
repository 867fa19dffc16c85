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
