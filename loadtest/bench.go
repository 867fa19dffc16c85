package loadtest

import (
	"fmt"
	"io"
	"math"

	"github.com/holdfast/holdfast/bench/floor"
)

// Bench is one make bench run: the Asynq floor, the synchronous designs
// and holdfast, all measured on the same machine in the same run.
type Bench struct {
	Machine    string       // one line: date, CPU, core count, versions
	Cores      int          // the machine's cores, for the CPU ceilings
	AsynqFloor floor.Result // raw Asynq enqueue + no-op processing
	// baseline-fcfs against the lean synchronous design: one UPDATE … SKIP
	// LOCKED a request, no Redis, net/http, 32 connections.
	Lean   *Report
	Rush   *Report // fcfs-rush, clients waiting for each outcome
	Intake *Report // fcfs-rush -intake: submissions only, then outcomes
	// The cart rush (seed 002's order reserve, every client at once):
	// cart-rush against holdfast, and baseline-cart against cmd/baseline's
	// cart mode, one transaction per request.
	CartRush, CartBaseline *Report
	// The hold storm (seed 000's holds, confirmed, cancelled or abandoned):
	// hold-storm against holdfast, and baseline-hold-storm against
	// cmd/baseline's hold mode, one transaction per request.
	HoldStorm, HoldBaseline *Report
	// The drop of one product option: the cart rush with one hot option
	// (load -hot-options 1), every cart one unit of it; cart-rush and
	// baseline-cart.
	DropRush, DropBaseline *Report
	// The group rush (best-available seats for groups of 1–6, two thirds
	// confirmed, a third let expire), at local commits only: group-rush
	// against holdfast, and baseline-group-rush against cmd/baseline's
	// group mode, one transaction per request.
	GroupRush, GroupBaseline *Report
	// Per-key serialization, measured at local commits only: isolation
	// (K4, one key's backlog drains while other keys' writes are timed)
	// and recovery (K5, a worker killed with SIGKILL mid-work).
	Isolation, Recovery *Report
	// CommitDelayUS is the commit_delay, in µs, that every design's
	// database had in these runs (commit_siblings 0): 0 for local commits.
	CommitDelayUS int
	// Delayed is the same make bench's parts measured again with every
	// design's database at a commit delay (BENCH_COMMIT_DELAY_US), as cloud
	// storage commits; nil when they were not.
	Delayed *Bench
}

// Targets of the issue that make bench checks (ratios against the floor and
// the synchronous designs of the same run). The hot-row rushes' ratios to their synchronous designs
// are in hotRows.
const (
	targetOfAsynq      = 0.5  // fcfs-rush completed/s vs Asynq's no-op processing
	targetOfLean       = 1.5  // fcfs-rush completed/s vs the lean synchronous design (issue 24)
	targetStoresOfLean = 0.2  // holdfast's Postgres + Redis CPU per write vs the lean design's (issue 24)
	targetSubmitP99Ms  = 50.0 // intake p99 submit latency
	targetRSSMiB       = 150.0
	targetCartP99Ms    = 500.0 // cart-rush (and drop) accept→terminal p99
	// K4: other keys' accept→terminal p99 while one key's backlog drains.
	targetIsolationP99Ms = 1000.0
	// K5: every write terminal this soon after a worker's kill -9.
	targetRecoverySeconds = 30.0
	// targetCommitDelayUS is the commit delay the hot-row targets "at a
	// commit delay" are set for: 1 ms, as cloud storage commits.
	targetCommitDelayUS = 1000
)

// WriteTable prints the run as Markdown tables with the ratios and a
// verdict per target; ok is true when every target is met. A run of some
// parts alone (no fcfs-rush) prints those sections and their CPU. With a
// Delayed run, each section shows both commit regimes, and the hot-row
// rushes' ratios to their synchronous designs come first, side by side.
func (b *Bench) WriteTable(w io.Writer) (ok bool) {
	fmt.Fprintf(w, "make bench — %s\n\n", b.Machine)
	ok = true
	sections := 0
	section := func(write func(io.Writer) bool) {
		if sections++; sections > 1 {
			fmt.Fprintln(w)
		}
		ok = write(w) && ok
	}
	if b.Rush != nil {
		section(b.writeFCFS)
	}
	if b.Isolation != nil || b.Recovery != nil {
		section(b.writeKeys)
	}
	if b.has(dropRuns) || b.has(cartRuns) || b.has(holdRuns) {
		section(b.writeHotRows)
	}
	if b.has(dropRuns) {
		section(func(w io.Writer) bool { return b.writeCart(w, "Drop of one product option", "drop", dropRuns) })
	}
	if b.has(cartRuns) {
		section(func(w io.Writer) bool { return b.writeCart(w, "Cart rush", "cart-rush", cartRuns) })
	}
	if b.has(holdRuns) {
		section(b.writeHold)
	}
	if b.GroupRush != nil && b.GroupBaseline != nil {
		section(b.writeGroup)
	}
	b.writeCPU(w)
	return ok
}

// checker prints a target's line of a Markdown table and keeps whether
// every target it printed was met.
type checker struct {
	w  io.Writer
	ok bool
}

// newChecker prints the head of a table of targets.
func newChecker(w io.Writer) *checker {
	fmt.Fprint(w, "\n| target | measured | wanted | verdict |\n|---|---:|---:|---|\n")
	return &checker{w: w, ok: true}
}

func (c *checker) check(name string, got, want float64, atLeast bool, unit string) {
	pass := got >= want
	if !atLeast {
		pass = got < want
	}
	c.ok = c.ok && pass
	mark := "met"
	if !pass {
		mark = "NOT met"
	}
	cmp := "≥"
	if !atLeast {
		cmp = "<"
	}
	fmt.Fprintf(c.w, "| %s | %.2f%s | %s %.2f%s | %s |\n", name, got, unit, cmp, want, unit, mark)
}

// writeFCFS prints the first-come-first-served rush's runs and targets.
func (b *Bench) writeFCFS(w io.Writer) (ok bool) {
	fmt.Fprintln(w, "| run | load | per second | latency p50 / p99 (ms) | invariants |")
	fmt.Fprintln(w, "|---|---|---:|---|---|")
	fmt.Fprintf(w, "| floor: Asynq enqueue + no-op processing | %d tasks, %d workers | %.0f processed | – | %d duplicates |\n",
		b.AsynqFloor.Tasks, b.AsynqFloor.Concurrency, b.AsynqFloor.ProcessedPerSec, b.AsynqFloor.Duplicates)
	row := func(name string, r *Report, rate float64, lat Percentiles) {
		seats := r.Outcomes["fcfs succeeded"] + r.Outcomes["fcfs.sync succeeded"]
		fmt.Fprintf(w, "| %s | %d users, %d clients, %d seats won | %.0f | %.1f / %.1f | %s |\n",
			name, r.Journeys, r.Concurrency, seats, rate, lat.P50, lat.P99, verdictOf(r))
	}
	row("lean synchronous: one UPDATE … SKIP LOCKED a request (no Redis, net/http, 32 connections)", b.Lean, b.Lean.CompletedPerSec, b.Lean.Submit)
	row("holdfast fcfs-rush: outcomes", b.Rush, b.Rush.CompletedPerSec, b.Rush.ClientRoundTrip)
	row("holdfast fcfs-rush -intake: 202s", b.Intake, b.Intake.AcceptedPerSec, b.Intake.Submit)

	c := newChecker(w)
	c.check("fcfs-rush outcomes/s ÷ Asynq floor", ratio(b.Rush.CompletedPerSec, b.AsynqFloor.ProcessedPerSec), targetOfAsynq, true, "×")
	c.check("fcfs-rush outcomes/s ÷ lean synchronous", ratio(b.Rush.CompletedPerSec, b.Lean.CompletedPerSec), targetOfLean, true, "×")
	// The shared stores, which do not scale out with API and workers.
	stores := func(r *Report) float64 { return cpuPerJourney(r, CPUPostgres, CPURedis) }
	c.check("fcfs-rush Postgres + Redis CPU per write (deferred tasks in) ÷ lean's", ratio(stores(b.Rush), stores(b.Lean)), targetStoresOfLean, false, "×")
	c.check("intake p99 submit latency", b.Intake.Submit.P99, targetSubmitP99Ms, false, " ms")
	for i, r := range []*Report{b.Rush, b.Intake} {
		for _, p := range []string{"api", "worker"} {
			if v, found := r.PeakRSSMiB[p]; found {
				c.check(fmt.Sprintf("%s peak resident memory, %s", p, []string{"fcfs-rush", "fcfs-rush -intake"}[i]), v, targetRSSMiB, false, " MiB")
			}
		}
	}
	violations := len(b.Lean.Violations) + len(b.Rush.Violations) + len(b.Intake.Violations)
	c.check("invariant violations (holdfast, lean)", float64(violations), 1, false, "")
	return c.ok
}

// writeCart prints a cart rush, the drop or the rush of several options
// that runs picks: holdfast's cart-rush beside the synchronous reserve, the
// same carts at the same concurrency, in each commit regime measured, with
// their latencies and invariants (their rates' ratio is in the hot-row
// table); name is the rush's in the targets.
func (b *Bench) writeCart(w io.Writer, title, name string, runs pick) (ok bool) {
	pairs := b.pairs(runs)
	fmt.Fprintf(w, "%s (seed 002's order reserve): %s, every client reserving at once, nothing confirmed:\n\n", title, cartLoad(pairs[0].h))
	fmt.Fprintln(w, "| run | commits | reserves per second | latency p50 / p99 (ms) | carts reserved / refused | units reserved | oversold units | duplicates | invariants |")
	fmt.Fprintln(w, "|---|---|---:|---|---|---:|---:|---:|---|")
	writePairs(w, pairs, "synchronous: one transaction per request, the cart's options locked FOR UPDATE",
		"holdfast cart-rush: reserve, then its outcome", func(r *Report) string {
			c := orZero(r.Cart)
			return fmt.Sprintf("%.0f | %.1f / %.1f | %d / %d | %d of %d | %d | %d | %s", r.CompletedPerSec, r.ClientRoundTrip.P50,
				r.ClientRoundTrip.P99, c.CartsReserved, c.CartsRefused, c.UnitsReserved, c.Options*c.StockPerOption, c.OversoldUnits, c.Duplicates, verdictOf(r))
		})
	c := newChecker(w)
	for _, p := range pairs {
		at := ", " + p.at.commits()
		c.check(name+" accept→terminal p99"+at, p.h.AcceptToDone.P99, targetCartP99Ms, false, " ms")
		fmt.Fprintf(w, "| (no target) %s p99 ÷ synchronous p99%s | %.2f× | – | – |\n", name, at, ratio(p.h.ClientRoundTrip.P99, p.s.ClientRoundTrip.P99))
		c.sideBySide(name, "synchronous cart", p)
	}
	return c.ok
}

// writeHold prints the hold storm: holdfast's hold-storm beside the
// synchronous hold, the same journeys at the same concurrency, in each
// commit regime measured, with what the holds came to and their invariants
// (their rates' ratio is in the hot-row table).
func (b *Bench) writeHold(w io.Writer) (ok bool) {
	pairs := b.pairs(holdRuns)
	fmt.Fprintf(w, "Hold storm (seed 000's holds): %s:\n\n", holdLoad(pairs[0].h))
	fmt.Fprintln(w, "| run | commits | journeys per second | writes per second | write latency p50 / p99 (ms) | holds granted / refused | confirmed / refused | cancelled / abandoned | room nights booked | oversold nights | double-booked | invariants |")
	fmt.Fprintln(w, "|---|---|---:|---:|---|---|---|---|---:|---:|---:|---|")
	writePairs(w, pairs, "synchronous: one transaction per request, the stay's stock rows locked FOR UPDATE",
		"holdfast hold-storm: each write, then its outcome", func(r *Report) string {
			c := orZero(r.Hold)
			return fmt.Sprintf("%.0f | %.0f | %.1f / %.1f | %d / %d | %d / %d | %d / %d | %d | %d | %d | %s", journeysPerSec(r), r.CompletedPerSec,
				r.ClientRoundTrip.P50, r.ClientRoundTrip.P99, c.HoldsGranted, c.HoldsRefused, c.Confirmed, c.ConfirmsRefused,
				c.Cancelled, c.Abandoned, c.RoomNightsBooked, c.OversoldNights, c.DoubleBooked, verdictOf(r))
		})
	c := newChecker(w)
	for _, p := range pairs {
		at := ", " + p.at.commits()
		fmt.Fprintf(w, "| (no target) hold-storm write p99 ÷ synchronous p99%s | %.2f× | – | – |\n", at, ratio(p.h.ClientRoundTrip.P99, p.s.ClientRoundTrip.P99))
		for _, r := range []*Report{p.s, p.h} {
			if c := r.Hold; c != nil {
				fmt.Fprintf(w, "| (no target) %s: held nights the clients still hold / the API counts%s | %d / %d | – | – |\n", r.Scenario, at, c.HeldNightsTold, c.HeldNightsSeen)
			}
		}
		c.sideBySide("hold-storm", "synchronous hold", p)
	}
	return c.ok
}

// writePairs prints, for each pair, the synchronous run's row, named
// sync, and holdfast's, named holdfast with its accept→terminal latency:
// a run's name, its commits, then cells.
func writePairs(w io.Writer, pairs []pair, sync, holdfast string, cells func(*Report) string) {
	for _, p := range pairs {
		fmt.Fprintf(w, "| %s | %s | %s |\n", sync, p.at.commits(), cells(p.s))
		fmt.Fprintf(w, "| %s (accept→terminal %.1f / %.1f ms) | %s | %s |\n", holdfast, p.h.AcceptToDone.P50, p.h.AcceptToDone.P99, p.at.commits(), cells(p.h))
	}
}

// sideBySide checks what every holdfast-beside-a-baseline section holds
// holdfast's run to: the API's and the worker's peak memory, and no
// invariant violation in it or the baseline's run, named name and
// baseline.
func (c *checker) sideBySide(name, baseline string, p pair) {
	at := ", " + p.at.commits()
	for _, proc := range []string{"api", "worker"} {
		if v, found := p.h.PeakRSSMiB[proc]; found {
			c.check(proc+" peak resident memory, "+name+at, v, targetRSSMiB, false, " MiB")
		}
	}
	c.check(fmt.Sprintf("invariant violations (%s, %s)%s", name, baseline, at), float64(len(p.h.Violations)+len(p.s.Violations)), 1, false, "")
}

// verdictOf is a run's invariants column: OK, or how many were violated.
func verdictOf(r *Report) string {
	if !r.OK {
		return fmt.Sprintf("%d VIOLATIONS", len(r.Violations))
	}
	return "OK"
}

// journeysPerSec is a run's journeys over its measured phase.
func journeysPerSec(r *Report) float64 { return ratio(float64(r.Journeys), r.Seconds) }

// holdLoad describes a hold storm's load from its report.
func holdLoad(r *Report) string {
	c := r.Hold
	if c == nil {
		return fmt.Sprintf("%d users, %d clients", r.Journeys, r.Concurrency)
	}
	return fmt.Sprintf("%d users, each holding one of %d room types of %d rooms for 1–3 nights in the next %d days; of the holds granted, "+
		"half confirmed, a quarter cancelled, a quarter abandoned; %d clients", c.Users, c.RoomTypes, c.RoomsPerType, stormDays, r.Concurrency)
}

// cartLoad describes a cart rush's load from its report.
func cartLoad(r *Report) string {
	c := r.Cart
	switch {
	case c == nil:
		return fmt.Sprintf("%d users, %d clients", r.Journeys, r.Concurrency)
	case c.Options == 1:
		return fmt.Sprintf("%d users each reserving one unit of one option of %d units, %d clients", c.Carts, c.StockPerOption, r.Concurrency)
	}
	return fmt.Sprintf("%d users with carts of one or two of %d options of %d units (%d units asked for, %d exist), %d clients",
		c.Carts, c.Options, c.StockPerOption, c.UnitsAsked, c.Options*c.StockPerOption, r.Concurrency)
}

// writeCPU prints what one request cost in CPU, by process, and the rate
// the machine's cores could sustain at that cost, a table for each commit
// regime measured. A run close to its ceiling is bound by the work it does
// per request, not by waiting.
func (b *Bench) writeCPU(w io.Writer) {
	if b.Cores <= 0 {
		return
	}
	for _, r := range b.regimes() {
		if r.costed() {
			r.writeRegimeCPU(cpuTable{w: w, cores: b.Cores})
		}
	}
}

// costed reports whether regime b measured a run the CPU table prints a
// line of: not the per-key part alone, which measures time.
func (b *Bench) costed() bool {
	for _, runs := range []pick{dropRuns, cartRuns, holdRuns, groupRuns} {
		if h, s := runs(b); h != nil && s != nil {
			return true
		}
	}
	return b.Rush != nil
}

// writeRegimeCPU prints the CPU table of the runs of b, one commit regime.
func (b *Bench) writeRegimeCPU(t cpuTable) {
	fmt.Fprintf(t.w, "\nCPU per request, ms, at %s (whole machine, %d cores; rest = anything else running):\n\n", b.commits(), t.cores)
	fmt.Fprintln(t.w, "| run | total | load tool | API / server | worker | Postgres | Redis | rest | ceiling = cores ÷ total | measured | of ceiling |")
	fmt.Fprintln(t.w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	if b.Rush != nil {
		b.writeFCFSCPU(t)
	}
	for _, part := range []struct {
		runs       pick
		sync, name string
	}{{dropRuns, "synchronous drop reserve", "holdfast drop, cart-rush of one option (reserve + outcome)"},
		{cartRuns, "synchronous cart reserve", "holdfast cart-rush (reserve + outcome)"}} {
		if h, s := part.runs(b); h != nil && s != nil {
			t.line(part.sync, s.CPUSeconds, s.Journeys, s.CompletedPerSec, "api")
			t.holdfast(part.name, h, h.CompletedPerSec)
		}
	}
	if h, s := holdRuns(b); h != nil && s != nil {
		t.line("synchronous hold storm, per journey", s.CPUSeconds, s.Journeys, journeysPerSec(s), "api")
		t.holdfast("holdfast hold-storm, per journey (writes + outcomes)", h, journeysPerSec(h))
	}
	if h, s := groupRuns(b); h != nil && s != nil {
		b.writeGroupCPU(t)
	}
	carts := "the drains of their users' and options' keys"
	for _, n := range []struct {
		name, drain string
		r           *Report
	}{{"fcfs-rush", "the event's drain", b.Rush}, {"drop", carts, b.DropRush}, {"cart-rush", carts, b.CartRush},
		{"hold-storm", "the drains of their room types' keys", b.HoldStorm}, {"group-rush", "the event's drain", b.GroupRush}} {
		if n.r != nil {
			writeDeferredNote(t.w, n.name, n.drain, n.r)
		}
	}
}

// cpuTable prints the lines of a CPU table on a machine of cores cores.
type cpuTable struct {
	w     io.Writer
	cores int
}

// line prints a run's line: cpu (seconds by process) spent on n requests
// served at rate a second (0: not a rate of its own); server names the
// process that served them.
func (t cpuTable) line(name string, cpu map[string]float64, n int, rate float64, server string) {
	total := cpuTotal(cpu)
	if total <= 0 || n <= 0 {
		return
	}
	ms := func(part string) string {
		v, found := cpu[part]
		if !found {
			return "–"
		}
		return fmt.Sprintf("%.3f", v*1000/float64(n))
	}
	perReq := total * 1000 / float64(n)
	ceiling := float64(t.cores) * 1000 / perReq
	measured, of := "–", "–"
	if rate > 0 {
		measured, of = fmt.Sprintf("%.0f/s", rate), fmt.Sprintf("%.0f%%", 100*rate/ceiling)
	}
	fmt.Fprintf(t.w, "| %s | %.3f | %s | %s | %s | %s | %s | %s | %.0f/s | %s | %s |\n", name, perReq,
		ms(CPULoadTool), ms(server), ms("worker"), ms(CPUPostgres), ms(CPURedis), ms(CPURest), ceiling, measured, of)
}

// holdfast prints a holdfast run's line, then, when the run measured its
// deferred tasks, their line and the sum of both.
func (t cpuTable) holdfast(name string, r *Report, rate float64) {
	t.line(name, r.CPUSeconds, r.Journeys, rate, "api")
	if r.SubmitCPUSeconds != nil {
		t.line("… of which until the last 202 (intake)", r.SubmitCPUSeconds, r.Journeys, r.AcceptedPerSec, "api")
	}
	if r.Deferred == nil || r.Deferred.Error != "" {
		return
	}
	t.line("… its deferred no-op tasks left at its end, run after it", r.Deferred.CPUSeconds, r.Journeys, 0, "api")
	all := map[string]float64{}
	for _, m := range []map[string]float64{r.CPUSeconds, r.Deferred.CPUSeconds} {
		for k, v := range m {
			all[k] += v
		}
	}
	all[CPUTotal] = cpuTotal(r.CPUSeconds) + cpuTotal(r.Deferred.CPUSeconds)
	t.line("… all in: the run and its deferred tasks", all, r.Journeys, 0, "api")
}

// writeFCFSCPU prints the CPU lines of the floor and the first-come-
// first-served runs.
func (b *Bench) writeFCFSCPU(t cpuTable) {
	f := b.AsynqFloor
	t.line("Asynq floor (per task)", f.CPUSeconds, f.Tasks, f.ProcessedPerSec, "floor")
	t.line("lean synchronous", b.Lean.CPUSeconds, b.Lean.Journeys, b.Lean.CompletedPerSec, "api")
	t.holdfast("holdfast fcfs-rush (submit + outcome)", b.Rush, b.Rush.CompletedPerSec)
	t.holdfast("holdfast fcfs-rush -intake (all work)", b.Intake, b.Intake.CompletedPerSec)
}

// writeDeferredNote says, under the CPU table, how many of a holdfast run's
// tasks were left deferred and what each cost when run after it; drain
// names the drains that applied their requests.
func writeDeferredNote(w io.Writer, name, drain string, r *Report) {
	switch d := r.Deferred; {
	case d == nil || r.Journeys <= 0:
	case d.Error != "":
		fmt.Fprintf(w, "\n%s's deferred tasks were not measured: %s\n", name, d.Error)
	case d.Tasks > 0:
		fmt.Fprintf(w, "\n%s ended with %d of its %d tasks deferred, their requests left to %s (K1, K4), %.3f ms of CPU each,\n"+
			"run after it: the rates above leave them out, the all-in line counts them (docs/benchmarks.md).\n",
			name, d.Tasks, max(r.Accepted, r.Journeys), drain, cpuTotal(d.CPUSeconds)*1000/float64(d.Tasks))
	}
}

// cpuTotal is the CPU seconds of a run: the machine's busy time, or the sum
// of the parts measured on their own when that is larger. The busy time
// leaves out time stolen by a hypervisor, which the processes' own times
// may include.
func cpuTotal(cpu map[string]float64) float64 {
	parts := 0.0
	for k, v := range cpu {
		if k != CPUTotal && k != CPURest {
			parts += v
		}
	}
	return max(cpu[CPUTotal], parts)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// cpuPerJourney is the CPU seconds per journey that the processes parts
// (CPUPostgres, CPURedis, …) spent on run r, its deferred tasks included;
// NaN when one of them was not measured, which fails any target.
func cpuPerJourney(r *Report, parts ...string) float64 {
	if r.Journeys == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, p := range parts {
		v, found := r.CPUSeconds[p]
		if !found {
			return math.NaN()
		}
		s += v
		if d := r.Deferred; d != nil {
			s += d.CPUSeconds[p]
		}
	}
	return s / float64(r.Journeys)
}

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
	c := newChecker(w)
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
