package loadtest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Report is the result of one run; its JSON form is what --json prints.
type Report struct {
	Scenario    string  `json:"scenario"`
	Date        string  `json:"date"`
	Concurrency int     `json:"concurrency"`
	Journeys    int     `json:"journeys"`
	Seconds     float64 `json:"seconds"`
	// Accepted is the number of 202s; AcceptedPerSec divides it by the
	// seconds from the first submit to the last 202.
	Accepted       int     `json:"accepted"`
	AcceptedPerSec float64 `json:"acceptedPerSec"`
	// Completed counts outcomes the clients saw (writes reaching a terminal
	// state, and successful reads); CompletedPerSec divides it by the whole
	// measured phase.
	Completed       int               `json:"completed"`
	CompletedPerSec float64           `json:"completedPerSec"`
	Submit          Percentiles       `json:"submitLatency"`
	AcceptToDone    Percentiles       `json:"acceptToTerminalLatency"`
	ClientRoundTrip Percentiles       `json:"clientRoundTripLatency"`
	Reads           Percentiles       `json:"readLatency"`
	Outcomes        map[string]int    `json:"outcomes"`
	Throttled       map[string]int    `json:"throttled"`
	Errors          map[string]int    `json:"errors"`
	ErrorSamples    map[string]string `json:"errorSamples,omitempty"`
	// PeakRSSMiB is the highest resident memory scraped from each process's
	// /metrics during the run.
	PeakRSSMiB map[string]float64 `json:"peakRssMiB"`
	// CPUSeconds is the CPU the measured phase cost, by part: the
	// machine's total, the load tool, each process whose /metrics was
	// scraped ("api", "worker"), and the rest (see CPURest).
	CPUSeconds map[string]float64 `json:"cpuSeconds,omitempty"`
	// SubmitCPUSeconds is the part of CPUSeconds from the first submit to
	// the last 202, in a run that submits everything first (Intake).
	SubmitCPUSeconds map[string]float64 `json:"submitCpuSeconds,omitempty"`
	// Deferred is the run's deferred tasks, run and measured after it
	// (Options.RedisURL); nil when not measured.
	Deferred *Deferred `json:"deferred,omitempty"`
	// Applying is what the workers did while an intake run's clients
	// submitted (Options.RedisURL, HoldApply); nil when not watched.
	Applying *Applying `json:"applying,omitempty"`
	// Streams is what idle-streams measured over its hold.
	Streams *StreamsReport `json:"idleStreams,omitempty"`
	// Cart is what cart-rush and baseline-cart saw of the carts and stock.
	Cart *CartReport `json:"cart,omitempty"`
	// Hold is what hold-storm and baseline-hold-storm saw of the holds and
	// stays.
	Hold *HoldReport `json:"holdStorm,omitempty"`
	// Group is what group-rush and baseline-group-rush saw of the groups'
	// holds and what the design's tables hold at the end.
	Group *GroupReport `json:"groupRush,omitempty"`
	// Soak is what soak sampled over its run, and its checks.
	Soak *SoakReport `json:"soak,omitempty"`
	// Order is fcfs-rush's check of the real-time order guarantee.
	Order *OrderReport `json:"order,omitempty"`
	// Isolation is what isolation measured of other keys while one
	// key's backlog drained (K4).
	Isolation *IsolationReport `json:"isolation,omitempty"`
	// Recovery is what recovery measured after it killed a worker (K5).
	Recovery   *RecoveryReport `json:"recovery,omitempty"`
	Violations []string        `json:"violations"`
	OK         bool            `json:"ok"`

	AcceptedSeries  []int `json:"acceptedPerSecondSeries"`
	CompletedSeries []int `json:"completedPerSecondSeries"`
}

// Report summarises the run.
func (r *Recorder) Report(scenario string, opt Options, journeys int, peaks map[string]float64, violations []string) *Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	secs := r.end.Sub(r.start).Seconds()
	submit, server := sorted(r.submit), sorted(r.server)
	rep := &Report{
		Scenario: scenario, Date: r.start.UTC().Format(time.RFC3339), Concurrency: opt.Concurrency,
		Journeys: journeys, Seconds: round(secs, 3),
		Accepted: len(r.submit), Completed: len(r.client) + len(r.reads),
		Submit: percentiles(submit), AcceptToDone: percentiles(server),
		ClientRoundTrip: percentiles(sorted(r.client)), Reads: percentiles(sorted(r.reads)),
		Outcomes: maps.Clone(r.outcomes), Throttled: maps.Clone(r.throttled), Errors: maps.Clone(r.errors),
		ErrorSamples: maps.Clone(r.firstErr), PeakRSSMiB: peaks, Violations: violations, OK: len(violations) == 0,
		AcceptedSeries: slices.Clone(r.accepted), CompletedSeries: slices.Clone(r.completed),
	}
	if rep.Violations == nil {
		rep.Violations = []string{}
	}
	if secs > 0 {
		rep.CompletedPerSec = round(float64(rep.Completed)/secs, 1)
		if d := r.lastAccept.Sub(r.start).Seconds(); d > 0 && rep.Accepted > 0 {
			rep.AcceptedPerSec = round(float64(rep.Accepted)/d, 1)
		}
	}
	return rep
}

func round(v float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}

// WriteText prints the report for people.
func (rep *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "scenario %s: %d journeys, %d clients, %.1f s\n", rep.Scenario, rep.Journeys, rep.Concurrency, rep.Seconds)
	if rep.Accepted > 0 {
		fmt.Fprintf(w, "  accepted   %8d   %9.1f /s   submit p50 %.1f ms  p95 %.1f ms  p99 %.1f ms\n",
			rep.Accepted, rep.AcceptedPerSec, rep.Submit.P50, rep.Submit.P95, rep.Submit.P99)
	}
	fmt.Fprintf(w, "  completed  %8d   %9.1f /s\n", rep.Completed, rep.CompletedPerSec)
	if rep.AcceptToDone.Count > 0 {
		fmt.Fprintf(w, "  accept→terminal p50 %.1f ms  p99 %.1f ms   (client round trip p50 %.1f ms  p99 %.1f ms)\n",
			rep.AcceptToDone.P50, rep.AcceptToDone.P99, rep.ClientRoundTrip.P50, rep.ClientRoundTrip.P99)
	}
	if rep.Reads.Count > 0 {
		fmt.Fprintf(w, "  reads p50 %.1f ms  p95 %.1f ms  p99 %.1f ms\n", rep.Reads.P50, rep.Reads.P95, rep.Reads.P99)
	}
	printCounts(w, "outcomes", rep.Outcomes)
	printCounts(w, "429s", rep.Throttled)
	printCounts(w, "errors", rep.Errors)
	for _, k := range slices.Sorted(maps.Keys(rep.ErrorSamples)) {
		fmt.Fprintf(w, "    e.g. %s: %s\n", k, rep.ErrorSamples[k])
	}
	if len(rep.PeakRSSMiB) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(rep.PeakRSSMiB)) {
			parts = append(parts, fmt.Sprintf("%s %.0f MiB", k, rep.PeakRSSMiB[k]))
		}
		fmt.Fprintf(w, "  peak resident memory: %s\n", strings.Join(parts, ", "))
	}
	if a := rep.Applying; a != nil {
		held := ""
		if a.Held {
			held = " (queues paused until the last 202)"
		}
		fmt.Fprintf(w, "  tasks the workers processed while clients submitted: %d%s\n", a.TasksWhileSubmitting, held)
	}
	if r := rep.Streams; r != nil {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(r.CPUPercent)) {
			parts = append(parts, fmt.Sprintf("%s %.1f%%", k, r.CPUPercent[k]))
		}
		fmt.Fprintf(w, "  %d position streams held open %.0f s: API resident memory %.1f MiB (%.1f MiB before); CPU of one core: %s\n",
			r.Streams, r.HoldSeconds, r.APIRSSMiB, r.APIRSSBeforeMiB, strings.Join(parts, ", "))
	}
	if c := rep.Cart; c != nil {
		fmt.Fprintf(w, "  carts: %d of %d reserved, %d refused; %d options of %d units, %d units asked for\n",
			c.CartsReserved, c.Carts, c.CartsRefused, c.Options, c.StockPerOption, c.UnitsAsked)
		fmt.Fprintf(w, "    units reserved %d (clients told of %d); oversold units %d; duplicate reservations %d\n",
			c.UnitsReserved, c.UnitsTold, c.OversoldUnits, c.Duplicates)
	}
	if s := rep.Soak; s != nil {
		s.writeText(w)
	}
	if o := rep.Order; o != nil {
		fmt.Fprintf(w, "  real-time order: %d pairs (one's 202 before the other was sent) checked, %d applied out of order\n",
			o.PairsChecked, o.OutOfOrder)
	}
	if r := rep.Isolation; r != nil {
		fmt.Fprintf(w, "  %s\n  %s\n", r.load(), r.measured())
	}
	if r := rep.Recovery; r != nil {
		fmt.Fprintf(w, "  %s\n  %s\n", r.load(), r.measured())
	}
	writeCPUPerJourney(w, "CPU per journey", rep.CPUSeconds, rep.Journeys)
	if rep.SubmitCPUSeconds != nil {
		writeCPUPerJourney(w, "… of which until the last 202", rep.SubmitCPUSeconds, rep.Journeys)
	}
	switch d := rep.Deferred; {
	case d == nil:
	case d.Error != "":
		fmt.Fprintf(w, "  tasks left deferred: not measured: %s\n", d.Error)
	default:
		fmt.Fprintf(w, "  tasks left deferred, run after the run: %d, done in %.1f s\n", d.Tasks, d.Seconds)
		writeCPUPerJourney(w, "… their CPU per journey", d.CPUSeconds, rep.Journeys)
	}
	if rep.OK {
		fmt.Fprintln(w, "  invariants: OK (no oversell, no duplicate, nothing lost)")
		return
	}
	fmt.Fprintf(w, "  invariants: %d VIOLATIONS\n", len(rep.Violations))
	for _, v := range rep.Violations {
		fmt.Fprintf(w, "    - %s\n", v)
	}
}

// writeCPUPerJourney prints cpu's total and parts divided by journeys, in
// milliseconds.
func writeCPUPerJourney(w io.Writer, title string, cpu map[string]float64, journeys int) {
	total := cpu[CPUTotal]
	if total <= 0 || journeys <= 0 {
		return
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(cpu)) {
		if k != CPUTotal {
			parts = append(parts, fmt.Sprintf("%s %.3f", k, cpu[k]*1000/float64(journeys)))
		}
	}
	fmt.Fprintf(w, "  %s: %.3f ms (%s)\n", title, total*1000/float64(journeys), strings.Join(parts, ", "))
}

func printCounts(w io.Writer, title string, m map[string]int) {
	if len(m) == 0 {
		return
	}
	fmt.Fprintf(w, "  %s:\n", title)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(w, "    %-48s %8d\n", k, m[k])
	}
}

// WriteJSON prints the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
