package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/loadtest"
)

// writeRun writes a fabricated report as the file name of dir, as make
// bench's load runs do (-json).
func writeRun(t *testing.T, dir, name string, rate float64, options int) {
	t.Helper()
	rep := &loadtest.Report{Scenario: name, Journeys: 300, Seconds: 1, Concurrency: 200, CompletedPerSec: rate, OK: true,
		Cart: &loadtest.CartReport{Options: options, StockPerOption: 100, Carts: 300}}
	var b bytes.Buffer
	require.NoError(t, rep.WriteJSON(&b))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644))
}

// load table reads a run's directory: the runs at local commits in it, the
// runs at the commit delay in commit-delay/, and a directory from before
// either (the cart part alone, no commit-delay-us.txt) as local commits.
func TestTableReadsBothRegimes(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "machine.txt"), []byte("test machine\n"), 0o644))
	writeRun(t, dir, "cart-baseline.json", 1000, 5)
	writeRun(t, dir, "cart-rush.json", 2500, 5)
	var out bytes.Buffer
	code, err := tableCmd([]string{dir}, &out)
	require.NoError(t, err)
	require.Zero(t, code, out.String())
	require.Contains(t, out.String(), "make bench — test machine\n\nHot rows")
	require.Contains(t, out.String(), "| cart-rush (5 options): reserves/s | 1000 | 2500 | 2.50× | ≥ 2.00× | met | – | – | – | – | not run |")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "commit-delay-us.txt"), []byte("0\n"), 0o644))
	delayed := filepath.Join(dir, "commit-delay")
	writeRun(t, delayed, "cart-baseline.json", 400, 5)
	writeRun(t, delayed, "cart-rush.json", 1000, 5)
	writeRun(t, dir, "drop-baseline.json", 1000, 1)
	writeRun(t, dir, "drop-rush.json", 3100, 1)
	writeRun(t, delayed, "drop-baseline.json", 300, 1)
	writeRun(t, delayed, "drop-rush.json", 2400, 1)
	require.NoError(t, os.WriteFile(filepath.Join(delayed, "commit-delay-us.txt"), []byte("1000\n"), 0o644))
	out.Reset()
	code, err = tableCmd([]string{dir}, &out)
	require.NoError(t, err)
	require.Equal(t, 1, code, "the cart rush at 2.5× the synchronous rate at 1 ms commits misses its 3×")
	require.Contains(t, out.String(), "| drop (1 option): reserves/s | 1000 | 3100 | 3.10× | ≥ 3.00× | met | 300 | 2400 | 8.00× | ≥ 7.00× | met |\n"+
		"| cart-rush (5 options): reserves/s | 1000 | 2500 | 2.50× | ≥ 2.00× | met | 400 | 1000 | 2.50× | ≥ 3.00× | NOT met |")

	require.NoError(t, os.WriteFile(filepath.Join(delayed, "commit-delay-us.txt"), []byte("1 ms\n"), 0o644))
	_, err = tableCmd([]string{dir}, &out)
	require.ErrorContains(t, err, `commit-delay-us.txt must hold the commit delay in µs, a whole number ≥ 0, not "1 ms\n"`)

	empty := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(empty, "machine.txt"), []byte("test machine\n"), 0o644))
	_, err = tableCmd([]string{empty}, &out)
	require.ErrorContains(t, err, "no part measured: no floor.json")
	writeRun(t, empty, "drop-rush.json", 3100, 1)
	_, err = tableCmd([]string{empty}, &out)
	require.ErrorContains(t, err, "drop-baseline.json: open "+filepath.Join(empty, "drop-baseline.json"), "half a part")
}

// A directory of the per-key part alone (BENCH_ONLY=keys) prints its
// section; isolation.json alone prints its row and target; a directory
// from before the part prints none of it.
func TestTableReadsTheKeysPart(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "machine.txt"), []byte("test machine\n"), 0o644))
	write := func(name string, rep *loadtest.Report) {
		var b bytes.Buffer
		require.NoError(t, rep.WriteJSON(&b))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644))
	}
	write("isolation.json", &loadtest.Report{Scenario: "isolation", OK: true, Isolation: &loadtest.IsolationReport{Backlog: 20000, OtherKeys: 10,
		OtherClients: 4, OtherWrites: 25, Other: loadtest.Percentiles{Count: 100, P50: 20, P99: 80, Max: 90}, BacklogOpen: 9000}})
	var out bytes.Buffer
	code, err := tableCmd([]string{dir}, &out)
	require.NoError(t, err)
	require.Zero(t, code, out.String())
	require.Contains(t, out.String(), "| K4: other keys' accept→terminal p99 while one key's backlog drains | 80.00 ms | < 1000.00 ms | met |")
	require.NotContains(t, out.String(), "K5:")

	write("recovery.json", &loadtest.Report{Scenario: "recovery", OK: true, Recovery: &loadtest.RecoveryReport{Writes: 10000, Keys: 100,
		LeaseTTLSeconds: 5, Killed: true, VictimBatches: 3, OpenAtKill: 8000, AllTerminalAfterKillSeconds: 36}})
	out.Reset()
	code, err = tableCmd([]string{dir}, &out)
	require.NoError(t, err)
	require.Equal(t, 1, code, "recovery took longer than 30 s")
	require.Contains(t, out.String(), "| K5: all writes terminal after a worker's kill -9 (LEASE_TTL 5s) | 36.00 s | < 30.00 s | NOT met |")

	old := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(old, "machine.txt"), []byte("test machine\n"), 0o644))
	writeRun(t, old, "cart-baseline.json", 1000, 5)
	writeRun(t, old, "cart-rush.json", 2500, 5)
	out.Reset()
	code, err = tableCmd([]string{old}, &out)
	require.NoError(t, err)
	require.Zero(t, code)
	require.NotContains(t, out.String(), "Per-key")
}

// -hot-options below 1 is refused before anything runs.
func TestHotOptionsMustBePositive(t *testing.T) {
	var stderr bytes.Buffer
	code, err := run([]string{"-secret", "x", "-hot-options", "0", "cart-rush"}, &bytes.Buffer{}, &stderr)
	require.Equal(t, 2, code)
	require.EqualError(t, err, "-hot-options must be at least 1, not 0")
}
