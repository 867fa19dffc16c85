package loadtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast/holdfast/client"
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
	// What each scenario measured of its own, nil for the others:
	// idle-streams over its hold; cart-rush and baseline-cart of the carts
	// and stock; hold-storm and baseline-hold-storm of the holds and stays;
	// group-rush and baseline-group-rush of the groups' holds and the
	// design's tables; soak its samples and checks; fcfs-rush its check of
	// the real-time order guarantee; isolation other keys' latency while
	// one key's backlog drained (K4); recovery after it killed a worker (K5).
	Streams    *StreamsReport   `json:"idleStreams,omitempty"`
	Cart       *CartReport      `json:"cart,omitempty"`
	Hold       *HoldReport      `json:"holdStorm,omitempty"`
	Group      *GroupReport     `json:"groupRush,omitempty"`
	Soak       *SoakReport      `json:"soak,omitempty"`
	Order      *OrderReport     `json:"order,omitempty"`
	Isolation  *IsolationReport `json:"isolation,omitempty"`
	Recovery   *RecoveryReport  `json:"recovery,omitempty"`
	Violations []string         `json:"violations"`
	OK         bool             `json:"ok"`
}

// Recorder collects what the virtual clients saw. It is safe for
// concurrent use.
type Recorder struct {
	mu         sync.Mutex
	start, end time.Time
	submit     []time.Duration // 202 latency
	server     []time.Duration // acceptedAt → completedAt, from the API
	client     []time.Duration // submit start → outcome seen by the client
	reads      []time.Duration
	outcomes   map[string]int // "kind status CODE"
	throttled  map[string]int // 429s by code
	errors     map[string]int // transport errors and unexpected 4xx/5xx
	firstErr   map[string]string
	lastAccept time.Time // when the last 202 arrived
	lost       []string
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{outcomes: map[string]int{}, throttled: map[string]int{}, errors: map[string]int{}, firstErr: map[string]string{}}
}

// Start marks the start of the measured phase.
func (r *Recorder) Start() {
	r.mu.Lock()
	r.start = time.Now()
	r.mu.Unlock()
}

// Stop marks its end.
func (r *Recorder) Stop() {
	r.mu.Lock()
	r.end = time.Now()
	r.mu.Unlock()
}

// Accepted records a 202 that took took.
func (r *Recorder) Accepted(kind string, at time.Time, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.submit = append(r.submit, took)
	if done := at.Add(took); done.After(r.lastAccept) {
		r.lastAccept = done
	}
}

// Throttled records a 429.
func (r *Recorder) Throttled(code string) {
	r.mu.Lock()
	r.throttled[code]++
	r.mu.Unlock()
}

// SubmitError records a write the API did not accept (other than a 429).
func (r *Recorder) SubmitError(kind string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	code := "TRANSPORT"
	if e, ok := errors.AsType[*client.Error](err); ok {
		code = e.Code
	}
	key := kind + " " + code
	r.errors[key]++
	if _, ok := r.firstErr[key]; !ok {
		r.firstErr[key] = err.Error()
	}
}

// Terminal records a request's outcome.
func (r *Recorder) Terminal(kind string, submitted time.Time, o client.Outcome) {
	now := time.Now()
	key := kind + " " + o.Status
	if o.Problem != nil {
		key += " " + o.Problem.Code
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes[key]++
	r.client = append(r.client, now.Sub(submitted))
	if o.CompletedAt != nil {
		r.server = append(r.server, o.CompletedAt.Sub(o.AcceptedAt))
	}
}

// Lost records an accepted request whose outcome could not be had.
func (r *Recorder) Lost(kind, requestID string, err error) {
	r.mu.Lock()
	r.lost = append(r.lost, fmt.Sprintf("%s request %s: no terminal state: %v", kind, requestID, err))
	r.mu.Unlock()
}

// Read records a synchronous read.
func (r *Recorder) Read(kind string, took time.Duration, err error) {
	if err != nil {
		r.SubmitError(kind, err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads = append(r.reads, took)
	r.outcomes[kind+" ok"]++
}

// LostViolations lists accepted requests that never reached a terminal state.
func (r *Recorder) LostViolations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lost) <= 5 {
		return slices.Clone(r.lost)
	}
	return append(slices.Clone(r.lost[:5]), fmt.Sprintf("... and %d more requests lost", len(r.lost)-5))
}

// Percentiles of a latency sample, in milliseconds.
type Percentiles struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50Ms"`
	P95   float64 `json:"p95Ms"`
	P99   float64 `json:"p99Ms"`
	Max   float64 `json:"maxMs"`
}

// percentiles of a latency sample.
func percentiles(d []time.Duration) Percentiles {
	s := slices.Sorted(slices.Values(d))
	if len(s) == 0 {
		return Percentiles{}
	}
	at := func(q float64) float64 {
		i := int(q*float64(len(s)-1) + 0.5)
		return float64(s[i].Microseconds()) / 1000
	}
	return Percentiles{Count: len(s), P50: at(0.50), P95: at(0.95), P99: at(0.99), Max: at(1)}
}

// Report summarises the run.
func (r *Recorder) Report(scenario string, opt Options, journeys int, peaks map[string]float64, violations []string) *Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	secs := r.end.Sub(r.start).Seconds()
	rep := &Report{
		Scenario: scenario, Date: r.start.UTC().Format(time.RFC3339), Concurrency: opt.Concurrency,
		Journeys: journeys, Seconds: round(secs, 3),
		Accepted: len(r.submit), Completed: len(r.client) + len(r.reads),
		Submit: percentiles(r.submit), AcceptToDone: percentiles(r.server),
		ClientRoundTrip: percentiles(r.client), Reads: percentiles(r.reads),
		Outcomes: maps.Clone(r.outcomes), Throttled: maps.Clone(r.throttled), Errors: maps.Clone(r.errors),
		ErrorSamples: maps.Clone(r.firstErr), PeakRSSMiB: peaks, Violations: append([]string{}, violations...), OK: len(violations) == 0,
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
	for i, m := range []map[string]int{rep.Outcomes, rep.Throttled, rep.Errors} {
		if len(m) > 0 {
			fmt.Fprintf(w, "  %s:\n", []string{"outcomes", "429s", "errors"}[i])
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(w, "    %-48s %8d\n", k, m[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(rep.ErrorSamples)) {
		fmt.Fprintf(w, "    e.g. %s: %s\n", k, rep.ErrorSamples[k])
	}
	if len(rep.PeakRSSMiB) > 0 {
		fmt.Fprintf(w, "  peak resident memory, MiB: %s\n", parts(rep.PeakRSSMiB, "%.0f", 1))
	}
	if a := rep.Applying; a != nil {
		fmt.Fprintf(w, "  tasks the workers processed while clients submitted: %d (queues paused until the last 202: %t)\n", a.TasksWhileSubmitting, a.Held)
	}
	if r := rep.Streams; r != nil {
		fmt.Fprintf(w, "  %d position streams held open %.0f s: API resident memory %.1f MiB (%.1f MiB before); CPU, %% of one core: %s\n",
			r.Streams, r.HoldSeconds, r.APIRSSMiB, r.APIRSSBeforeMiB, parts(r.CPUPercent, "%.1f", 1))
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
	rep.writeCPU(w, "CPU per journey", rep.CPUSeconds)
	if rep.SubmitCPUSeconds != nil {
		rep.writeCPU(w, "… of which until the last 202", rep.SubmitCPUSeconds)
	}
	switch d := rep.Deferred; {
	case d == nil:
	case d.Error != "":
		fmt.Fprintf(w, "  tasks left deferred: not measured: %s\n", d.Error)
	default:
		fmt.Fprintf(w, "  tasks left deferred, run after the run: %d, done in %.1f s\n", d.Tasks, d.Seconds)
		rep.writeCPU(w, "… their CPU per journey", d.CPUSeconds)
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

// writeCPU prints cpu's total and parts divided by the journeys, in ms.
func (rep *Report) writeCPU(w io.Writer, title string, cpu map[string]float64) {
	if total := cpu[CPUTotal]; total > 0 && rep.Journeys > 0 {
		rest := maps.Clone(cpu)
		delete(rest, CPUTotal)
		per := 1000 / float64(rep.Journeys)
		fmt.Fprintf(w, "  %s: %.3f ms (%s)\n", title, total*per, parts(rest, "%.3f", per))
	}
}

// parts prints m's values, each times scale, by name in order.
func parts(m map[string]float64, format string, scale float64) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s "+format, k, m[k]*scale))
	}
	return strings.Join(out, ", ")
}

// WriteJSON prints the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
