package loadtest

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The invariant checks must be able to fail: these feed them what an
// overselling or duplicating system would have told its clients.
func TestSeatBookFindsDuplicates(t *testing.T) {
	b := newSeatBook()
	b.won("u1", 1)
	b.won("u2", 2)
	require.Empty(t, b.bad.all())
	b.won("u3", 1) // seat 1 twice
	b.won("u2", 3) // user u2 twice
	bad := b.bad.all()
	require.Len(t, bad, 2)
	require.Contains(t, bad[0], "seat 1 given to u1 and to u3")
	require.Contains(t, bad[1], "user u2 got seats 2 and 3")
}

func TestBaselineCheckFindsOversell(t *testing.T) {
	s := &baselineFCFS{seats: 2, book: newSeatBook()}
	for i, u := range []string{"a", "b", "c"} {
		s.book.won(u, int64(i+1))
	}
	v, err := s.Check(t.Context(), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"oversold: 3 seats given for 2"}, v)
}

func TestReportNumbers(t *testing.T) {
	r := NewRecorder()
	r.Start()
	for i := 1; i <= 100; i++ {
		r.Accepted("w", r.start, time.Duration(i)*time.Millisecond)
	}
	r.Lost("w", "id-1", errLost{})
	r.Stop()
	rep := r.Report("x", Options{Concurrency: 4}, 100, nil, r.LostViolations())
	require.Equal(t, 100, rep.Accepted)
	require.InDelta(t, 50, rep.Submit.P50, 1)
	require.InDelta(t, 99, rep.Submit.P99, 1)
	require.Equal(t, 100.0, rep.Submit.Max)
	require.False(t, rep.OK, "a lost request is a violation")
	var out bytes.Buffer
	rep.WriteText(&out)
	require.Contains(t, out.String(), "1 VIOLATIONS")
}

type errLost struct{}

func (errLost) Error() string { return "context canceled" }

// The CPU table divides each part by the requests served and turns the
// total into the rate the cores could sustain.
func TestBenchCPUTable(t *testing.T) {
	rep := func(cpu map[string]float64, journeys int, perSec float64) *Report {
		return &Report{Journeys: journeys, CompletedPerSec: perSec, AcceptedPerSec: perSec, CPUSeconds: cpu, OK: true}
	}
	b := Bench{
		Cores:        2,
		EnqueueFloor: rep(map[string]float64{CPUTotal: 1, CPULoadTool: 0.5, "api": 0.25, CPURest: 0.25}, 1000, 1500),
		DurableFloor: rep(map[string]float64{CPUTotal: 1.5, CPULoadTool: 0.5, "api": 0.5, CPUPostgres: 0.5}, 1000, 1200),
		Literal:      rep(nil, 1000, 100),
		SkipLocked:   rep(nil, 1000, 200),
		// 2 s of CPU for 1,000 seats: 2 ms each, so 2 cores allow 1,000/s.
		Rush: rep(map[string]float64{CPUTotal: 2, CPULoadTool: 0.4, "api": 0.8, "worker": 0.3,
			CPUPostgres: 0.3, CPURedis: 0.1, CPURest: 0.1}, 1000, 500),
		Intake:     rep(map[string]float64{CPUTotal: 4}, 1000, 400),
		HeldIntake: rep(map[string]float64{CPUTotal: 3}, 1000, 600),
	}
	b.HeldIntake.Submit.P99 = 42
	// The round trip with nothing of holdfast's: 1.6 ms a request; with
	// -intake, 202s at 900/s.
	b.RoundTrip = rep(map[string]float64{CPUTotal: 1.6, CPULoadTool: 0.4, "api": 0.8, CPUPostgres: 0.2, CPURedis: 0.2}, 1000, 1000)
	b.RoundTripIntake = rep(map[string]float64{CPUTotal: 1.5}, 1000, 900)
	b.RoundTripIntake.SubmitCPUSeconds = map[string]float64{CPUTotal: 0.5}
	// Until the last 202: 1 ms a request, so 2 cores allow 2,000/s.
	b.HeldIntake.SubmitCPUSeconds = map[string]float64{CPUTotal: 1, CPULoadTool: 0.25, "api": 0.5, CPUPostgres: 0.1, CPURedis: 0.15}
	// 0.5 s more after the run for 600 deferred tasks: 2.5 ms a seat in all.
	b.Rush.Deferred = &Deferred{Tasks: 600, CPUSeconds: map[string]float64{CPUTotal: 0.5, "worker": 0.3, CPURedis: 0.2}}
	// Parts over the machine's total (time stolen by a hypervisor is not in
	// the total): the line counts the parts.
	b.Intake.Deferred = &Deferred{Tasks: 500, CPUSeconds: map[string]float64{CPUTotal: 0.3, "worker": 0.3, CPURedis: 0.2}}
	b.AsynqFloor.Tasks, b.AsynqFloor.ProcessedPerSec = 1000, 4000
	b.AsynqFloor.CPUSeconds = map[string]float64{"total": 0.4, "floor": 0.3, "redis": 0.08, "rest": 0.02}
	var out bytes.Buffer
	b.WriteTable(&out)
	table := out.String()
	require.Contains(t, table, "| holdfast fcfs-rush (submit + outcome) | 2.000 | 0.400 | 0.800 | 0.300 | 0.300 | 0.100 | 0.100 | 1000/s | 500/s | 50% |")
	require.Contains(t, table, "| Asynq floor (per task) | 0.400 | – | 0.300 | – | – | 0.080 | 0.020 | 5000/s | 4000/s | 80% |")
	require.Contains(t, table, "| … its deferred no-op tasks, fired after the run | 0.500 | – | – | 0.300 | – | 0.200 | – | 4000/s | – | – |")
	require.Contains(t, table, "| … all in: the run and its deferred tasks | 2.500 | 0.400 | 0.800 | 0.600 | 0.300 | 0.300 | 0.100 | 800/s | – | – |")
	require.Contains(t, table, "fcfs-rush left 600 of its 1000 tasks scheduled for later, their requests left to the event's drain (K1, K4), 0.833 ms of CPU each.")
	require.Contains(t, table, "| … all in: the run and its deferred tasks | 4.500 | – | – | 0.300 | – | 0.200 | – | 444/s | – | – |")
	require.Contains(t, table, "| holdfast fcfs-rush -intake (all work) | 4.000 | – | – | – | – | – | – | 500/s | 400/s | 80% |")
	require.NotContains(t, table, "seed 004 literal, synchronous | ", "a run without CPU figures has no CPU row")
	require.Contains(t, table, "| … storing each request in Postgres first | 1.500 | 0.500 | 0.500 | – | 0.500 | – | – | 1333/s | 1200/s | 90% |")
	require.Contains(t, table, "| (no target) durable floor ÷ enqueue-only floor | 0.80× | – | – |")
	require.Contains(t, table, "| (no target) intake 202s/s ÷ durable floor | 0.33× | – | – |")
	require.Contains(t, table, "| (no target) intake, workers held back, ÷ enqueue-only floor | 0.40× | – | – |")
	require.Contains(t, table, "| (no target) intake p99, workers held back | 42.00 ms | – | – |")
	require.Contains(t, table, "| holdfast fcfs-rush -intake -hold-apply (all work) | 3.000 | – | – | – | – | – | – | 667/s | 600/s | 90% |\n"+
		"| … of which until the last 202 (intake) | 1.000 | 0.250 | 0.500 | – | 0.100 | 0.150 | – | 2000/s | 600/s | 30% |")

	require.Contains(t, table, "| plain round trip (outcomes) | 1.600 | 0.400 | 0.800 | – | 0.200 | 0.200 | – | 1250/s | 1000/s | 80% |\n"+
		"| plain round trip, all submitted first (all work) | 1.500 | – | – | – | – | – | – | 1333/s | 900/s | 68% |\n"+
		"| … of which until the last 202 (intake) | 0.500 | – | – | – | – | – | – | 4000/s | 900/s | 22% |")
	require.Contains(t, table, "| (no target) plain round trip outcomes/s ÷ Asynq floor | 0.25× | – | – |")
	require.Contains(t, table, "| (no target) fcfs-rush outcomes/s ÷ plain round trip | 0.50× | – | – |")
	require.Contains(t, table, "| (no target) plain round trip 202s/s ÷ enqueue-only floor | 0.60× | – | – |")
	require.Contains(t, table, "| (no target) intake 202s/s ÷ plain round trip's | 0.44× | – | – |")

	// A run from before the durable floor, the round trip and the held
	// intake existed has no such lines.
	b.DurableFloor, b.HeldIntake, b.RoundTrip, b.RoundTripIntake = nil, nil, nil, nil
	out.Reset()
	b.WriteTable(&out)
	require.NotContains(t, out.String(), "durable floor")
	require.NotContains(t, out.String(), "held")
	require.NotContains(t, out.String(), "round trip")
	require.NotContains(t, out.String(), "long poll")
}

// The JSON report carries the figures and the verdict a machine reads, and
// the deferred tasks when they were measured.
func TestReportJSON(t *testing.T) {
	r := NewRecorder()
	r.Start()
	r.Accepted("w", r.start, 20*time.Millisecond)
	r.Stop()
	rep := r.Report("fcfs-rush", Options{Concurrency: 4}, 1, nil, nil)
	rep.Deferred = &Deferred{Tasks: 3, CPUSeconds: map[string]float64{CPUTotal: 0.01}}
	var out bytes.Buffer
	require.NoError(t, rep.WriteJSON(&out))
	var got struct {
		Scenario string
		Accepted int
		OK       bool
		Submit   struct{ P50Ms float64 } `json:"submitLatency"`
		Deferred struct{ Tasks int }
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &got))
	require.Equal(t, "fcfs-rush", got.Scenario)
	require.Equal(t, 1, got.Accepted)
	require.True(t, got.OK)
	require.InDelta(t, 20, got.Submit.P50Ms, 0.5)
	require.Equal(t, 3, got.Deferred.Tasks)
}

// The progress bar shows journeys done of all, and draws nothing where the
// output is not a terminal (a pipe, a file, a buffer).
func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	require.False(t, isTerminal(&buf))
	f, err := os.CreateTemp(t.TempDir(), "out")
	require.NoError(t, err)
	defer f.Close()
	require.False(t, isTerminal(f), "a regular file is not a terminal")
	quiet := newProgress(&buf, "fcfs-rush", 10)
	quiet.Step()
	quiet.Done()
	require.Zero(t, buf.Len())

	p := &progress{w: &buf, name: "fcfs-rush", total: 10, start: time.Now()}
	for range 4 {
		p.Step()
	}
	p.draw()
	require.Contains(t, buf.String(), "fcfs-rush [################........................] 4/10")
}
