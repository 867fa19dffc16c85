package loadtest

import (
	"fmt"
	"io"
)

// The hot-row rushes of make bench — the drop of one product option, the
// cart rush of five and the hold storm — each beside its synchronous
// design, at local commits and, in Bench.Delayed, with every design's
// database at a commit delay, as cloud storage commits: a synchronous
// design holds its row locks across each commit, holdfast commits a batch
// at a time.

// pick chooses a holdfast run and its synchronous run from the runs of one
// commit regime; either is nil when it was not measured.
type pick func(*Bench) (h, s *Report)

func dropRuns(b *Bench) (h, s *Report) { return b.DropRush, b.DropBaseline }
func cartRuns(b *Bench) (h, s *Report) { return b.CartRush, b.CartBaseline }
func holdRuns(b *Bench) (h, s *Report) { return b.HoldStorm, b.HoldBaseline }

// pair is a holdfast run h beside its synchronous run s, at commit regime at.
type pair struct {
	at   *Bench
	h, s *Report
}

// regimes are b (its runs at local commits) and, when measured, b.Delayed.
func (b *Bench) regimes() []*Bench {
	if b.Delayed == nil {
		return []*Bench{b}
	}
	return []*Bench{b, b.Delayed}
}

// pairs are the pairs of runs that runs picks, one for each regime of b
// that measured both.
func (b *Bench) pairs(runs pick) []pair {
	var out []pair
	for _, r := range b.regimes() {
		if h, s := runs(r); h != nil && s != nil {
			out = append(out, pair{r, h, s})
		}
	}
	return out
}

// has reports whether some regime of b measured both runs of runs.
func (b *Bench) has(runs pick) bool { return len(b.pairs(runs)) > 0 }

// commits names b's commit regime.
func (b *Bench) commits() string {
	if b.CommitDelayUS == 0 {
		return "local commits"
	}
	return fmt.Sprintf("commit_delay %d µs", b.CommitDelayUS)
}

// target is a ratio wanted: at least want or, with atMost, at most want;
// none when want is 0.
type target struct {
	want   float64
	atMost bool
}

// judge gives the wanted and verdict cells of a ratio got, and whether it
// meets t (a ratio without a target does).
func (t target) judge(got float64) (wanted, verdict string, ok bool) {
	if t.want == 0 {
		return "(no target)", "–", true
	}
	cmp := "≥"
	ok = got >= t.want
	if t.atMost {
		cmp, ok = "≤", got <= t.want // NaN, not measured, meets neither
	}
	verdict = "met"
	if !ok {
		verdict = "NOT met"
	}
	return fmt.Sprintf("%s %.2f×", cmp, t.want), verdict, ok
}

// hotRow is a line of the hot-row table: a measure of a holdfast run and
// of its synchronous run, and the ratio wanted of the first to the second,
// at local commits and at targetCommitDelayUS.
type hotRow struct {
	rush, measure  string
	runs           pick
	of             func(*Report) float64
	format         string // of a measure's cell
	local, delayed target
}

// hotRows are the hot-row table's lines, with issue 44's targets.
var hotRows = []hotRow{
	{"drop", "reserves/s", dropRuns, completedPerSec, "%.0f", target{want: 3}, target{want: 7}},
	{"cart-rush", "reserves/s", cartRuns, completedPerSec, "%.0f", target{want: 2}, target{want: 3}},
	{"hold-storm", "journeys/s", holdRuns, journeysPerSec, "%.0f", target{want: 1.5}, target{want: 2}},
	{"hold-storm", "Postgres CPU per journey, ms (deferred tasks in)", holdRuns, postgresMs, "%.3f", target{want: 0.5, atMost: true}, target{}},
}

func completedPerSec(r *Report) float64 { return r.CompletedPerSec }

// postgresMs is the Postgres CPU per journey of run r, its deferred tasks
// included, in ms.
func postgresMs(r *Report) float64 { return 1000 * cpuPerJourney(r, CPUPostgres) }

// writeHotRows prints, for each hot-row rush measured, the synchronous
// design's rate, holdfast's and their ratio with its target and verdict,
// at local commits and at the commit delay, side by side.
func (b *Bench) writeHotRows(w io.Writer) (ok bool) {
	delayed, at := "commit delay", "at local commits (none at a commit delay in this run)"
	if d := b.Delayed; d != nil {
		delayed = d.commits()
		at = "at local commits and with every design's database at " + delayed + " (commit_siblings 0), as cloud storage commits"
	}
	fmt.Fprintf(w, "Hot rows: each rush against holdfast beside its synchronous design (ratio = holdfast ÷ synchronous), %s:\n\n", at)
	fmt.Fprintf(w, "| rush | local: synchronous | holdfast | ratio | wanted | verdict | %s: synchronous | holdfast | ratio | wanted | verdict |\n", delayed)
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|")
	ok = true
	for _, row := range hotRows {
		if !b.has(row.runs) {
			continue
		}
		local, okLocal := row.cells(b, row.local)
		at, okDelayed := row.cells(b.Delayed, row.delayed)
		ok = ok && okLocal && okDelayed
		fmt.Fprintf(w, "| %s: %s | %s | %s |\n", row.name(b), row.measure, local, at)
	}
	return ok
}

// name is the row's rush, with its options for a cart rush.
func (row hotRow) name(b *Bench) string {
	c := b.pairs(row.runs)[0].h.Cart
	switch {
	case c == nil:
		return row.rush
	case c.Options == 1:
		return row.rush + " (1 option)"
	}
	return fmt.Sprintf("%s (%d options)", row.rush, c.Options)
}

// cells are the row's five cells at regime r (nil when not measured): the
// synchronous run's measure, holdfast's, their ratio, the ratio wanted and
// the verdict; ok unless the target is missed. The delayed target holds at
// targetCommitDelayUS only.
func (row hotRow) cells(r *Bench, t target) (string, bool) {
	if r == nil {
		return "– | – | – | – | not run", true
	}
	h, s := row.runs(r)
	if h == nil || s == nil {
		return "– | – | – | – | not run", true
	}
	got := ratio(row.of(h), row.of(s))
	wanted, verdict, ok := t.judge(got)
	if r.CommitDelayUS != 0 && r.CommitDelayUS != targetCommitDelayUS {
		wanted, verdict, ok = fmt.Sprintf("(targets are at %d µs)", targetCommitDelayUS), "–", true
	}
	return fmt.Sprintf(row.format+" | "+row.format+" | %.2f× | %s | %s", row.of(s), row.of(h), got, wanted, verdict), ok
}
