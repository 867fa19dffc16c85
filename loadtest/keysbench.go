package loadtest

import (
	"fmt"
	"io"
	"math"
)

// writeKeys prints make bench's per-key serialization part: isolation's
// other keys' latency while one key's backlog drains (K4) and recovery's
// time from a worker's kill -9 until every write was terminal (K5), each
// run's raw numbers, then their targets. A run not measured (a directory
// from before them) is left out.
func (b *Bench) writeKeys(w io.Writer) (ok bool) {
	fmt.Fprintf(w, "Per-key serialization (K4, K5), at %s:\n\n", b.commits())
	fmt.Fprintln(w, "| run | load | measured | invariants |")
	fmt.Fprintln(w, "|---|---|---|---|")
	iso, rec := b.Isolation, b.Recovery
	if iso != nil {
		r := orZero(iso.Isolation)
		fmt.Fprintf(w, "| isolation: one key's backlog drains, other keys' writes timed | %s | %s | %s |\n", r.load(), r.measured(), verdictOf(iso))
	}
	if rec != nil {
		r := orZero(rec.Recovery)
		fmt.Fprintf(w, "| recovery: a worker killed (kill -9) mid-work, another left | %s | %s | %s |\n", r.load(), r.measured(), verdictOf(rec))
	}
	c := &checker{w: w, ok: true}
	fmt.Fprintln(w, "\n| target | measured | wanted | verdict |")
	fmt.Fprintln(w, "|---|---:|---:|---|")
	violations := 0
	if iso != nil {
		p99 := math.NaN() // not measured fails the target
		if r := orZero(iso.Isolation); r.Other.Count > 0 {
			p99 = r.Other.P99
		}
		c.check("K4: other keys' accept→terminal p99 while one key's backlog drains", p99, targetIsolationP99Ms, false, " ms")
		violations += len(iso.Violations)
	}
	if rec != nil {
		r, took := orZero(rec.Recovery), math.NaN()
		if r.Killed {
			took = r.AllTerminalAfterKillSeconds
		}
		c.check(fmt.Sprintf("K5: all writes terminal after a worker's kill -9 (LEASE_TTL %s)", r.leaseTTL()), took, targetRecoverySeconds, false, " s")
		violations += len(rec.Violations)
	}
	c.check("invariant violations (isolation, recovery)", float64(violations), 1, false, "")
	return c.ok
}

// orZero is *r, or T's zero value for a report that lacks it.
func orZero[T any](r *T) *T {
	if r == nil {
		return new(T)
	}
	return r
}
