package loadtest

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// keysRuns are fabricated isolation and recovery runs: other keys' p99 of
// p99 ms beside a backlog with open grabs left, and a kill after which the
// last write was terminal in took seconds.
func keysRuns(p99 float64, open int, took float64) (iso, rec *Report) {
	iso = &Report{Scenario: "isolation", OK: open > 0, Isolation: &IsolationReport{Backlog: 20000, OtherKeys: 10, OtherClients: 4,
		OtherWrites: 25, Other: Percentiles{Count: 100, P50: 20, P99: p99, Max: p99 + 1}, BacklogOpen: open}}
	if open == 0 {
		iso.Violations = []string{"the hot key's backlog of 20000 had drained"}
	}
	rec = &Report{Scenario: "recovery", OK: true, Recovery: &RecoveryReport{Writes: 10000, Keys: 100, LeaseTTLSeconds: 5, Killed: true,
		VictimBatches: 4, OpenAtKill: 7500, AllTerminalAfterKillSeconds: took}}
	return iso, rec
}

// The per-key part prints each run's raw numbers, then K4's and K5's
// targets; a missed target, a run that could not measure (a drained
// backlog, a victim not killed) and a missing run each show.
func TestBenchKeysTable(t *testing.T) {
	iso, rec := keysRuns(80.2, 12832, 6.6)
	b := &Bench{Machine: "test", Cores: 2, Isolation: iso, Recovery: rec}
	var out bytes.Buffer
	require.True(t, b.WriteTable(&out))
	require.Equal(t, "make bench — test\n\nPer-key serialization (K4, K5), at local commits:\n\n"+
		"| run | load | measured | invariants |\n|---|---|---|---|\n"+
		"| isolation: one key's backlog drains, other keys' writes timed | 20000 grabs on one event, submitted with the workers held back; "+
		"then 4 clients × 25 grabs on 10 other events, one at a time, 20ms apart | other keys' accept→terminal p50 / p99 / max 20.0 / 80.2 / 81.2 ms "+
		"over 100 writes; 12832 of the backlog still open at the last | OK |\n"+
		"| recovery: a worker killed (kill -9) mid-work, another left | 10000 grabs on 100 events, submitted with the workers held back; "+
		"two workers, one killed with SIGKILL once it has applied a batch | killed after 4 batches of its own with 7500 writes open; "+
		"all terminal 6.6 s after the kill (LEASE_TTL 5s) | OK |\n\n"+
		"| target | measured | wanted | verdict |\n|---|---:|---:|---|\n"+
		"| K4: other keys' accept→terminal p99 while one key's backlog drains | 80.20 ms | < 1000.00 ms | met |\n"+
		"| K5: all writes terminal after a worker's kill -9 (LEASE_TTL 5s) | 6.60 s | < 30.00 s | met |\n"+
		"| invariant violations (isolation, recovery) | 0.00 | < 1.00 | met |\n", out.String(), "no CPU table for runs that measure time")

	b.Isolation, b.Recovery = keysRuns(1200, 0, 31)
	out.Reset()
	require.False(t, b.WriteTable(&out))
	require.Contains(t, out.String(), "0 of the backlog still open at the last | 1 VIOLATIONS |")
	require.Contains(t, out.String(), "| K4: other keys' accept→terminal p99 while one key's backlog drains | 1200.00 ms | < 1000.00 ms | NOT met |\n"+
		"| K5: all writes terminal after a worker's kill -9 (LEASE_TTL 5s) | 31.00 s | < 30.00 s | NOT met |\n"+
		"| invariant violations (isolation, recovery) | 1.00 | < 1.00 | NOT met |")

	b.Isolation = nil
	b.Recovery.Recovery.Killed, b.Recovery.Recovery.LeaseTTLSeconds = false, 0
	out.Reset()
	require.False(t, b.WriteTable(&out), "a victim not killed measured nothing")
	require.NotContains(t, out.String(), "isolation:")
	require.Contains(t, out.String(), "| the victim worker was not killed | OK |")
	require.Contains(t, out.String(), "| K5: all writes terminal after a worker's kill -9 (LEASE_TTL not told) | NaN s | < 30.00 s | NOT met |")
}

// A run from before the per-key part prints no section of it; one with
// both prints it after the first-come-first-served tables.
func TestBenchKeysAfterFCFS(t *testing.T) {
	rep := func() *Report { return &Report{Journeys: 1000, CompletedPerSec: 1000, AcceptedPerSec: 1000, OK: true} }
	b := &Bench{Machine: "test", Lean: rep(), Rush: rep(), Intake: rep()}
	var out bytes.Buffer
	b.WriteTable(&out)
	require.NotContains(t, out.String(), "Per-key")
	b.Isolation, b.Recovery = keysRuns(80, 100, 6)
	out.Reset()
	b.WriteTable(&out)
	require.Regexp(t, `(?s)\| holdfast fcfs-rush -intake: 202s .*\| invariant violations \(holdfast, lean\) \| 0.00 \| < 1.00 \| met \|\n\n`+
		`Per-key serialization \(K4, K5\), at local commits:`, out.String())
}

// The text report tells both scenarios' numbers.
func TestKeysInTheTextReport(t *testing.T) {
	iso, rec := keysRuns(80.2, 12832, 6.6)
	var out bytes.Buffer
	iso.WriteText(&out)
	require.Contains(t, out.String(), "\n  20000 grabs on one event, submitted with the workers held back; then 4 clients × 25 grabs on 10 other events, "+
		"one at a time, 20ms apart\n  other keys' accept→terminal p50 / p99 / max 20.0 / 80.2 / 81.2 ms over 100 writes; 12832 of the backlog still open at the last\n")
	out.Reset()
	rec.WriteText(&out)
	require.Contains(t, out.String(), "\n  killed after 4 batches of its own with 7500 writes open; all terminal 6.6 s after the kill (LEASE_TTL 5s)\n")
}
