package loadtest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/holdfast/holdfast/client"
)

// Recorder collects what the virtual clients saw. It is safe for
// concurrent use.
type Recorder struct {
	mu         sync.Mutex
	start      time.Time
	end        time.Time
	submit     []time.Duration // 202 latency
	server     []time.Duration // acceptedAt → completedAt, from the API
	client     []time.Duration // submit start → outcome seen by the client
	reads      []time.Duration
	outcomes   map[string]int // "kind status CODE"
	throttled  map[string]int // 429s by code
	errors     map[string]int // transport errors and unexpected 4xx/5xx
	accepted   []int          // per second since start
	completed  []int
	lastAccept time.Time // when the last 202 arrived
	lost       []string
	firstErr   map[string]string
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

func bump(series []int, sec int) []int {
	if sec < 0 {
		sec = 0
	}
	for len(series) <= sec {
		series = append(series, 0)
	}
	series[sec]++
	return series
}

// Accepted records a 202 that took took.
func (r *Recorder) Accepted(kind string, at time.Time, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.submit = append(r.submit, took)
	done := at.Add(took)
	r.accepted = bump(r.accepted, int(done.Sub(r.start)/time.Second))
	if done.After(r.lastAccept) {
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
	key := kind + " " + errorCode(err)
	r.errors[key]++
	if _, ok := r.firstErr[key]; !ok {
		r.firstErr[key] = err.Error()
	}
}

func errorCode(err error) string {
	if e, ok := errors.AsType[*client.Error](err); ok {
		return e.Code
	}
	return "TRANSPORT"
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
	r.completed = bump(r.completed, int(now.Sub(r.start)/time.Second))
}

// Lost records an accepted request whose outcome could not be had.
func (r *Recorder) Lost(kind, requestID string, err error) {
	r.mu.Lock()
	r.lost = append(r.lost, fmt.Sprintf("%s request %s: no terminal state: %v", kind, requestID, err))
	r.mu.Unlock()
}

// Read records a synchronous read.
func (r *Recorder) Read(kind string, at time.Time, took time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		key := kind + " " + errorCode(err)
		r.errors[key]++
		if _, ok := r.firstErr[key]; !ok {
			r.firstErr[key] = err.Error()
		}
		return
	}
	r.reads = append(r.reads, took)
	r.completed = bump(r.completed, int(at.Add(took).Sub(r.start)/time.Second))
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

// Outcomes returns the outcome counts ("kind status CODE" → n).
func (r *Recorder) Outcomes() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.outcomes))
	for k, v := range r.outcomes {
		out[k] = v
	}
	return out
}

// Percentiles of a latency sample, in milliseconds.
type Percentiles struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50Ms"`
	P95   float64 `json:"p95Ms"`
	P99   float64 `json:"p99Ms"`
	Max   float64 `json:"maxMs"`
}

// sorted returns a sorted copy of a latency sample.
func sorted(d []time.Duration) []time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}

// percentiles of a sorted sample.
func percentiles(s []time.Duration) Percentiles {
	if len(s) == 0 {
		return Percentiles{}
	}
	at := func(q float64) float64 {
		i := int(q*float64(len(s)-1) + 0.5)
		return float64(s[i].Microseconds()) / 1000
	}
	return Percentiles{Count: len(s), P50: at(0.50), P95: at(0.95), P99: at(0.99), Max: at(1)}
}
