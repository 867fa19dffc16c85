package loadtest

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/holdfast/holdfast/bench/floor"
)

// Bench is one make bench run: the floors, the synchronous baselines and
// holdfast, all measured on the same machine in the same run.
type Bench struct {
	Machine      string       // one line: date, CPU, core count, versions
	Cores        int          // the machine's cores, for the CPU ceilings
	AsynqFloor   floor.Result // raw Asynq enqueue + no-op processing
	EnqueueFloor *Report      // enqueue-floor: an HTTP handler that only enqueues
	// enqueue-floor against a handler that stores each request durably
	// (holdfast's group commit) before it enqueues; nil in runs before it.
	DurableFloor *Report
	Literal      *Report // baseline-fcfs against the seed's literal UPDATE
	SkipLocked   *Report // baseline-fcfs with FOR UPDATE SKIP LOCKED
	// baseline-fcfs against the lean synchronous design: one UPDATE … SKIP
	// LOCKED a request, no Redis, net/http, 32 connections. Nil in runs
	// before it.
	Lean   *Report
	Rush   *Report // fcfs-rush, clients waiting for each outcome
	Intake *Report // fcfs-rush -intake: submissions only, then outcomes
	// fcfs-rush -intake -hold-apply: the same with the workers held back
	// until the last 202, the API's intake alone; nil in runs before it.
	HeldIntake *Report
	// baseline-roundtrip against cmd/baseline's roundtrip mode: the durable
	// handler plus each request's Asynq task processed as it comes and a
	// long poll for it, a write's round trip built the plain way with
	// nothing of holdfast's in it; then the same with -intake. Nil in runs
	// before them.
	RoundTrip, RoundTripIntake *Report
	// The cart rush (seed 002's order reserve, every client at once):
	// cart-rush against holdfast, and baseline-cart against cmd/baseline's
	// cart mode, one transaction per request. Nil in runs before them.
	CartRush, CartBaseline *Report
	// The hold storm (seed 000's holds, confirmed, cancelled or abandoned):
	// hold-storm against holdfast, and baseline-hold-storm against
	// cmd/baseline's hold mode, one transaction per request. Nil in runs
	// before them.
	HoldStorm, HoldBaseline *Report
}

// Targets of the issue that make bench checks (ratios against floors from
// the same run).
const (
	targetOfAsynq      = 0.5  // fcfs-rush completed/s vs Asynq's no-op processing
	targetOfSkipLocked = 5.0  // fcfs-rush completed/s vs the SKIP LOCKED baseline
	targetOfLean       = 1.5  // fcfs-rush completed/s vs the lean synchronous design (issue 24)
	targetStoresOfLean = 0.2  // holdfast's Postgres + Redis CPU per write vs the lean design's (issue 24)
	targetOfEnqueue    = 0.5  // intake 202s/s vs the enqueue-only handler
	targetSubmitP99Ms  = 50.0 // intake p99 submit latency
	targetRSSMiB       = 150.0
	targetCartOfSync   = 1.5   // cart-rush reserves/s vs the synchronous reserve (issue 19)
	targetCartP99Ms    = 500.0 // cart-rush accept→terminal p99
)

// WriteTable prints the run as Markdown tables with the ratios and a
// verdict per target; ok is true when every target is met. A run of the
// cart or hold part alone (no fcfs-rush) prints that section and its CPU.
func (b *Bench) WriteTable(w io.Writer) (ok bool) {
	fmt.Fprintf(w, "make bench — %s\n\n", b.Machine)
	ok = true
	sections := 0
	gap := func() {
		if sections++; sections > 1 {
			fmt.Fprintln(w)
		}
	}
	if b.Rush != nil {
		gap()
		ok = b.writeFCFS(w)
	}
	if b.CartRush != nil && b.CartBaseline != nil {
		gap()
		ok = b.writeCart(w) && ok
	}
	if b.HoldStorm != nil && b.HoldBaseline != nil {
		gap()
		ok = b.writeHold(w) && ok
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
	row := func(name, what string, r *Report, rate float64, lat Percentiles) {
		verdict := verdictOf(r)
		fmt.Fprintf(w, "| %s | %s | %.0f | %.1f / %.1f | %s |\n", name, what, rate, lat.P50, lat.P99, verdict)
	}
	load := func(r *Report) string {
		seats := ""
		if n := r.Outcomes["fcfs succeeded"] + r.Outcomes["fcfs.sync succeeded"]; n > 0 {
			seats = fmt.Sprintf(", %d seats won", n)
		}
		return fmt.Sprintf("%d users, %d clients%s", r.Journeys, r.Concurrency, seats)
	}
	row("floor: HTTP handler that only enqueues", load(b.EnqueueFloor), b.EnqueueFloor, b.EnqueueFloor.AcceptedPerSec, b.EnqueueFloor.Submit)
	if d := b.DurableFloor; d != nil {
		row("floor: … that stores each request in Postgres first", load(d), d, d.AcceptedPerSec, d.Submit)
	}
	if r := b.RoundTrip; r != nil {
		row("plain round trip: stored, its task processed as it comes, a long poll (no auth, no logic): outcomes", load(r), r, r.CompletedPerSec, r.ClientRoundTrip)
	}
	if r := b.RoundTripIntake; r != nil {
		row("plain round trip, all submitted first: 202s", load(r), r, r.AcceptedPerSec, r.Submit)
	}
	row("baseline: seed 004 UPDATE, synchronous", load(b.Literal)+soldOutNote(b.Literal), b.Literal, b.Literal.CompletedPerSec, b.Literal.Submit)
	row("baseline: … FOR UPDATE SKIP LOCKED", load(b.SkipLocked), b.SkipLocked, b.SkipLocked.CompletedPerSec, b.SkipLocked.Submit)
	if l := b.Lean; l != nil {
		row("baseline: lean, one UPDATE … SKIP LOCKED a request (no Redis, net/http, 32 connections)", load(l), l, l.CompletedPerSec, l.Submit)
	}
	row("holdfast fcfs-rush: outcomes", load(b.Rush), b.Rush, b.Rush.CompletedPerSec, b.Rush.ClientRoundTrip)
	row("holdfast fcfs-rush -intake: 202s", load(b.Intake), b.Intake, b.Intake.AcceptedPerSec, b.Intake.Submit)
	if h := b.HeldIntake; h != nil {
		row("holdfast … workers held back until the last 202", load(h), h, h.AcceptedPerSec, h.Submit)
	}

	c := &checker{w: w, ok: true}
	check := c.check
	fmt.Fprintln(w, "\n| target | measured | wanted | verdict |")
	fmt.Fprintln(w, "|---|---:|---:|---|")
	check("fcfs-rush outcomes/s ÷ Asynq floor", ratio(b.Rush.CompletedPerSec, b.AsynqFloor.ProcessedPerSec), targetOfAsynq, true, "×")
	check("fcfs-rush outcomes/s ÷ SKIP LOCKED baseline", ratio(b.Rush.CompletedPerSec, b.SkipLocked.CompletedPerSec), targetOfSkipLocked, true, "×")
	check("fcfs-rush outcomes/s ÷ seed's literal baseline", ratio(b.Rush.CompletedPerSec, b.Literal.CompletedPerSec), 1, true, "×")
	if l := b.Lean; l != nil {
		check("fcfs-rush outcomes/s ÷ lean synchronous", ratio(b.Rush.CompletedPerSec, l.CompletedPerSec), targetOfLean, true, "×")
		check("fcfs-rush Postgres + Redis CPU per write (deferred tasks in) ÷ lean's", ratio(storesCPU(b.Rush), storesCPU(l)), targetStoresOfLean, false, "×")
	}
	check("intake 202s/s ÷ enqueue-only floor", ratio(b.Intake.AcceptedPerSec, b.EnqueueFloor.AcceptedPerSec), targetOfEnqueue, true, "×")
	check("intake p99 submit latency", b.Intake.Submit.P99, targetSubmitP99Ms, false, " ms")
	if d := b.DurableFloor; d != nil {
		fmt.Fprintf(w, "| (no target) durable floor ÷ enqueue-only floor | %.2f× | – | – |\n", ratio(d.AcceptedPerSec, b.EnqueueFloor.AcceptedPerSec))
		fmt.Fprintf(w, "| (no target) intake 202s/s ÷ durable floor | %.2f× | – | – |\n", ratio(b.Intake.AcceptedPerSec, d.AcceptedPerSec))
	}
	if r := b.RoundTrip; r != nil {
		fmt.Fprintf(w, "| (no target) plain round trip outcomes/s ÷ Asynq floor | %.2f× | – | – |\n", ratio(r.CompletedPerSec, b.AsynqFloor.ProcessedPerSec))
		fmt.Fprintf(w, "| (no target) fcfs-rush outcomes/s ÷ plain round trip | %.2f× | – | – |\n", ratio(b.Rush.CompletedPerSec, r.CompletedPerSec))
	}
	if r := b.RoundTripIntake; r != nil {
		fmt.Fprintf(w, "| (no target) plain round trip 202s/s ÷ enqueue-only floor | %.2f× | – | – |\n", ratio(r.AcceptedPerSec, b.EnqueueFloor.AcceptedPerSec))
		fmt.Fprintf(w, "| (no target) intake 202s/s ÷ plain round trip's | %.2f× | – | – |\n", ratio(b.Intake.AcceptedPerSec, r.AcceptedPerSec))
	}
	if h := b.HeldIntake; h != nil {
		fmt.Fprintf(w, "| (no target) intake, workers held back, ÷ enqueue-only floor | %.2f× | – | – |\n", ratio(h.AcceptedPerSec, b.EnqueueFloor.AcceptedPerSec))
		fmt.Fprintf(w, "| (no target) intake p99, workers held back | %.2f ms | – | – |\n", h.Submit.P99)
	}
	for _, run := range []struct {
		name string
		r    *Report
	}{{"fcfs-rush", b.Rush}, {"fcfs-rush -intake", b.Intake}, {"fcfs-rush -intake -hold-apply", b.HeldIntake}} {
		if run.r == nil {
			continue
		}
		for _, p := range []string{"api", "worker"} {
			if v, found := run.r.PeakRSSMiB[p]; found {
				check(fmt.Sprintf("%s peak resident memory, %s", p, run.name), v, targetRSSMiB, false, " MiB")
			}
		}
	}
	violations := 0
	for _, r := range []*Report{b.EnqueueFloor, b.DurableFloor, b.RoundTrip, b.RoundTripIntake, b.SkipLocked, b.Lean, b.Rush, b.Intake, b.HeldIntake} {
		if r != nil {
			violations += len(r.Violations)
		}
	}
	check("invariant violations (holdfast, floors, SKIP LOCKED, lean)", float64(violations), 1, false, "")
	return c.ok
}

// writeCart prints the cart rush: holdfast's cart-rush beside the
// synchronous reserve, the same carts at the same concurrency, with the
// ratio of their rates and their invariants.
func (b *Bench) writeCart(w io.Writer) (ok bool) {
	h, s := b.CartRush, b.CartBaseline
	fmt.Fprintf(w, "Cart rush (seed 002's order reserve): %s, every client reserving at once, nothing confirmed:\n\n", cartLoad(h))
	fmt.Fprintln(w, "| run | reserves per second | latency p50 / p99 (ms) | carts reserved / refused | units reserved | oversold units | duplicates | invariants |")
	fmt.Fprintln(w, "|---|---:|---|---|---:|---:|---:|---|")
	row := func(name string, r *Report) {
		c := r.Cart
		if c == nil {
			c = &CartReport{}
		}
		verdict := verdictOf(r)
		fmt.Fprintf(w, "| %s | %.0f | %.1f / %.1f | %d / %d | %d of %d | %d | %d | %s |\n", name, r.CompletedPerSec,
			r.ClientRoundTrip.P50, r.ClientRoundTrip.P99, c.CartsReserved, c.CartsRefused, c.UnitsReserved,
			c.Options*c.StockPerOption, c.OversoldUnits, c.Duplicates, verdict)
	}
	row("synchronous: one transaction per request, the cart's options locked FOR UPDATE", s)
	row(fmt.Sprintf("holdfast cart-rush: reserve, then its outcome (accept→terminal %.1f / %.1f ms)", h.AcceptToDone.P50, h.AcceptToDone.P99), h)
	c := &checker{w: w, ok: true}
	fmt.Fprintln(w, "\n| target | measured | wanted | verdict |")
	fmt.Fprintln(w, "|---|---:|---:|---|")
	c.check("cart-rush reserves/s ÷ synchronous", ratio(h.CompletedPerSec, s.CompletedPerSec), targetCartOfSync, true, "×")
	c.check("cart-rush accept→terminal p99", h.AcceptToDone.P99, targetCartP99Ms, false, " ms")
	fmt.Fprintf(w, "| (no target) cart-rush p99 ÷ synchronous p99 | %.2f× | – | – |\n", ratio(h.ClientRoundTrip.P99, s.ClientRoundTrip.P99))
	c.sideBySide("cart-rush", "synchronous cart", h, s)
	return c.ok
}

// writeHold prints the hold storm: holdfast's hold-storm beside the
// synchronous hold, the same journeys at the same concurrency, with the
// ratio of their rates and their invariants.
func (b *Bench) writeHold(w io.Writer) (ok bool) {
	h, s := b.HoldStorm, b.HoldBaseline
	fmt.Fprintf(w, "Hold storm (seed 000's holds): %s:\n\n", holdLoad(h))
	fmt.Fprintln(w, "| run | journeys per second | writes per second | write latency p50 / p99 (ms) | holds granted / refused | confirmed / refused | cancelled / abandoned | room nights booked | oversold nights | double-booked | invariants |")
	fmt.Fprintln(w, "|---|---:|---:|---|---|---|---|---:|---:|---:|---|")
	row := func(name string, r *Report) {
		c := r.Hold
		if c == nil {
			c = &HoldReport{}
		}
		verdict := verdictOf(r)
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %.1f / %.1f | %d / %d | %d / %d | %d / %d | %d | %d | %d | %s |\n", name, journeysPerSec(r),
			r.CompletedPerSec, r.ClientRoundTrip.P50, r.ClientRoundTrip.P99, c.HoldsGranted, c.HoldsRefused, c.Confirmed, c.ConfirmsRefused,
			c.Cancelled, c.Abandoned, c.RoomNightsBooked, c.OversoldNights, c.DoubleBooked, verdict)
	}
	row("synchronous: one transaction per request, the stay's stock rows locked FOR UPDATE", s)
	row(fmt.Sprintf("holdfast hold-storm: each write, then its outcome (accept→terminal %.1f / %.1f ms)", h.AcceptToDone.P50, h.AcceptToDone.P99), h)
	c := &checker{w: w, ok: true}
	fmt.Fprintln(w, "\n| target | measured | wanted | verdict |")
	fmt.Fprintln(w, "|---|---:|---:|---|")
	fmt.Fprintf(w, "| (no target) hold-storm journeys/s ÷ synchronous | %.2f× | – | – |\n", ratio(journeysPerSec(h), journeysPerSec(s)))
	fmt.Fprintf(w, "| (no target) hold-storm write p99 ÷ synchronous p99 | %.2f× | – | – |\n", ratio(h.ClientRoundTrip.P99, s.ClientRoundTrip.P99))
	for _, r := range []*Report{s, h} {
		if c := r.Hold; c != nil {
			fmt.Fprintf(w, "| (no target) %s: held nights the clients still hold / the API counts | %d / %d | – | – |\n", r.Scenario, c.HeldNightsTold, c.HeldNightsSeen)
		}
	}
	c.sideBySide("hold-storm", "synchronous hold", h, s)
	return c.ok
}

// sideBySide checks what every holdfast-beside-a-baseline section holds
// holdfast's run h to: the API's and the worker's peak memory, and no
// invariant violation in h or the baseline's run s.
func (c *checker) sideBySide(name, baseline string, h, s *Report) {
	for _, p := range []string{"api", "worker"} {
		if v, found := h.PeakRSSMiB[p]; found {
			c.check(p+" peak resident memory, "+name, v, targetRSSMiB, false, " MiB")
		}
	}
	c.check(fmt.Sprintf("invariant violations (%s, %s)", name, baseline), float64(len(h.Violations)+len(s.Violations)), 1, false, "")
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
	if c == nil {
		return fmt.Sprintf("%d users, %d clients", r.Journeys, r.Concurrency)
	}
	return fmt.Sprintf("%d users with carts of one or two of %d options of %d units (%d units asked for, %d exist), %d clients",
		c.Carts, c.Options, c.StockPerOption, c.UnitsAsked, c.Options*c.StockPerOption, r.Concurrency)
}

// writeCPU prints what one request cost in CPU, by process, and the rate
// the machine's cores could sustain at that cost. A run close to its
// ceiling is bound by the work it does per request, not by waiting.
func (b *Bench) writeCPU(w io.Writer) {
	if b.Cores <= 0 {
		return
	}
	fmt.Fprintf(w, "\nCPU per request, ms (whole machine, %d cores; rest = anything else running):\n\n", b.Cores)
	fmt.Fprintln(w, "| run | total | load tool | API / server | worker | Postgres | Redis | rest | ceiling = cores ÷ total | measured | of ceiling |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	line := func(name string, cpu map[string]float64, n int, rate float64, server string) {
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
		ceiling := float64(b.Cores) * 1000 / perReq
		measured, of := "–", "–"
		if rate > 0 {
			measured, of = fmt.Sprintf("%.0f/s", rate), fmt.Sprintf("%.0f%%", 100*rate/ceiling)
		}
		fmt.Fprintf(w, "| %s | %.3f | %s | %s | %s | %s | %s | %s | %.0f/s | %s | %s |\n", name, perReq,
			ms(CPULoadTool), ms(server), ms("worker"), ms(CPUPostgres), ms(CPURedis), ms(CPURest), ceiling, measured, of)
	}
	// holdfast prints a run's line, then, when the run measured its
	// deferred tasks, their line and the sum of both.
	holdfast := func(name string, r *Report, rate float64) {
		line(name, r.CPUSeconds, r.Journeys, rate, "api")
		if r.SubmitCPUSeconds != nil {
			line("… of which until the last 202 (intake)", r.SubmitCPUSeconds, r.Journeys, r.AcceptedPerSec, "api")
		}
		if r.Deferred == nil || r.Deferred.Error != "" {
			return
		}
		line("… its deferred no-op tasks left at its end, run after it", r.Deferred.CPUSeconds, r.Journeys, 0, "api")
		all := map[string]float64{}
		for _, m := range []map[string]float64{r.CPUSeconds, r.Deferred.CPUSeconds} {
			for k, v := range m {
				all[k] += v
			}
		}
		all[CPUTotal] = cpuTotal(r.CPUSeconds) + cpuTotal(r.Deferred.CPUSeconds)
		line("… all in: the run and its deferred tasks", all, r.Journeys, 0, "api")
	}
	if b.Rush != nil {
		b.writeFCFSCPU(w, line, holdfast)
	}
	if b.CartRush != nil && b.CartBaseline != nil {
		line("synchronous cart reserve", b.CartBaseline.CPUSeconds, b.CartBaseline.Journeys, b.CartBaseline.CompletedPerSec, "api")
		holdfast("holdfast cart-rush (reserve + outcome)", b.CartRush, b.CartRush.CompletedPerSec)
	}
	if b.HoldStorm != nil && b.HoldBaseline != nil {
		line("synchronous hold storm, per journey", b.HoldBaseline.CPUSeconds, b.HoldBaseline.Journeys, journeysPerSec(b.HoldBaseline), "api")
		holdfast("holdfast hold-storm, per journey (writes + outcomes)", b.HoldStorm, journeysPerSec(b.HoldStorm))
	}
	if b.Rush != nil {
		writeDeferredNote(w, "fcfs-rush", "the event's drain", b.Rush)
	}
	if b.CartRush != nil {
		writeDeferredNote(w, "cart-rush", "the drains of their users' and options' keys", b.CartRush)
	}
	if b.HoldStorm != nil {
		writeDeferredNote(w, "hold-storm", "the drains of their room types' keys", b.HoldStorm)
	}
}

// writeFCFSCPU prints the CPU lines of the floors and the first-come-
// first-served runs, with writeCPU's line and holdfast printers.
func (b *Bench) writeFCFSCPU(w io.Writer, line func(string, map[string]float64, int, float64, string), holdfast func(string, *Report, float64)) {
	f := b.AsynqFloor
	line("Asynq floor (per task)", f.CPUSeconds, f.Tasks, f.ProcessedPerSec, "floor")
	line("enqueue-only HTTP floor", b.EnqueueFloor.CPUSeconds, b.EnqueueFloor.Journeys, b.EnqueueFloor.AcceptedPerSec, "api")
	if d := b.DurableFloor; d != nil {
		line("… storing each request in Postgres first", d.CPUSeconds, d.Journeys, d.AcceptedPerSec, "api")
	}
	if r := b.RoundTrip; r != nil {
		line("plain round trip (outcomes)", r.CPUSeconds, r.Journeys, r.CompletedPerSec, "api")
	}
	if r := b.RoundTripIntake; r != nil {
		line("plain round trip, all submitted first (all work)", r.CPUSeconds, r.Journeys, r.CompletedPerSec, "api")
		if r.SubmitCPUSeconds != nil {
			line("… of which until the last 202 (intake)", r.SubmitCPUSeconds, r.Journeys, r.AcceptedPerSec, "api")
		}
	}
	line("seed 004 literal, synchronous", b.Literal.CPUSeconds, b.Literal.Journeys, b.Literal.CompletedPerSec, "api")
	line("… SKIP LOCKED", b.SkipLocked.CPUSeconds, b.SkipLocked.Journeys, b.SkipLocked.CompletedPerSec, "api")
	if l := b.Lean; l != nil {
		line("lean synchronous", l.CPUSeconds, l.Journeys, l.CompletedPerSec, "api")
	}
	holdfast("holdfast fcfs-rush (submit + outcome)", b.Rush, b.Rush.CompletedPerSec)
	holdfast("holdfast fcfs-rush -intake (all work)", b.Intake, b.Intake.CompletedPerSec)
	if h := b.HeldIntake; h != nil {
		holdfast("holdfast fcfs-rush -intake -hold-apply (all work)", h, h.CompletedPerSec)
	}
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
		fmt.Fprintf(w, "\n%s ended with %d of its %d tasks deferred, their requests left to %s (K1, K4), %.3f ms of CPU each.\n"+
			"They run as no-ops once a drain has applied their requests, folded into one task per group (or one by one\n"+
			"with AGGREGATE_DEFERRED_TASKS=false); the load tool runs them right after the run and measures them.\n"+
			"The rates above do not include them; the all-in line's ceiling does. Groups folded during the run are in its CPU.\n",
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

// soldOutNote says how many users the literal baseline told SOLD_OUT or
// CONTENTION although seats were left: its known false sold-outs.
func soldOutNote(r *Report) string {
	var parts []string
	for k, v := range r.Outcomes {
		if strings.HasSuffix(k, "CONTENTION") {
			parts = append(parts, fmt.Sprintf("%d CONTENTION", v))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// storesCPU is the CPU seconds per journey that Postgres and Redis spent on
// run r, its deferred tasks included: the shared stores, which do not scale
// out with API and workers. It is NaN when either was not measured (its
// processes not visible to the load tool), which fails any target.
func storesCPU(r *Report) float64 {
	pg, okPG := r.CPUSeconds[CPUPostgres]
	rd, okRedis := r.CPUSeconds[CPURedis]
	if r.Journeys == 0 || !okPG || !okRedis {
		return math.NaN()
	}
	s := pg + rd
	if d := r.Deferred; d != nil {
		s += d.CPUSeconds[CPUPostgres] + d.CPUSeconds[CPURedis]
	}
	return s / float64(r.Journeys)
}
