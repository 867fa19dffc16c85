package loadtest

import (
	"bytes"
	"encoding/json"
	"strings"
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
		Cores: 2,
		// 2 s of CPU for 1,000 seats: 2 ms each, so 2 cores allow 1,000/s.
		Rush: rep(map[string]float64{CPUTotal: 2, CPULoadTool: 0.4, "api": 0.8, "worker": 0.3,
			CPUPostgres: 0.3, CPURedis: 0.1, CPURest: 0.1}, 1000, 500),
		Intake: rep(map[string]float64{CPUTotal: 4}, 1000, 400),
		Lean:   rep(map[string]float64{CPUTotal: 2, CPUPostgres: 1, CPURedis: 0}, 1000, 800),
	}
	// Until the last 202: 1 ms a request, so 2 cores allow 2,000/s.
	b.Intake.SubmitCPUSeconds = map[string]float64{CPUTotal: 1, CPULoadTool: 0.25, "api": 0.5, CPUPostgres: 0.1, CPURedis: 0.15}
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
	require.Contains(t, table, "| … its deferred no-op tasks left at its end, run after it | 0.500 | – | – | 0.300 | – | 0.200 | – | 4000/s | – | – |")
	require.Contains(t, table, "| … all in: the run and its deferred tasks | 2.500 | 0.400 | 0.800 | 0.600 | 0.300 | 0.300 | 0.100 | 800/s | – | – |")
	require.Contains(t, table, "fcfs-rush ended with 600 of its 1000 tasks deferred, their requests left to the event's drain (K1, K4), 0.833 ms of CPU each,")
	require.Contains(t, table, "| holdfast fcfs-rush -intake (all work) | 4.000 | – | – | – | – | – | – | 500/s | 400/s | 80% |\n"+
		"| … of which until the last 202 (intake) | 1.000 | 0.250 | 0.500 | – | 0.100 | 0.150 | – | 2000/s | 400/s | 20% |")
	require.Contains(t, table, "| … all in: the run and its deferred tasks | 4.500 | – | – | 0.300 | – | 0.200 | – | 444/s | – | – |")
	// The lean design's row, its CPU and two targets: the rate, and the
	// shared stores' CPU per write with the rush's deferred tasks counted
	// (0.3 + 0.1 + 0.2 s against 1.0 s).
	require.Contains(t, table, "| fcfs-rush outcomes/s ÷ lean synchronous | 0.62× | ≥ 1.50× | NOT met |")
	require.Contains(t, table, "| fcfs-rush Postgres + Redis CPU per write (deferred tasks in) ÷ lean's | 0.60× | < 0.20× | NOT met |")
	require.Contains(t, table, "| lean synchronous | 2.000 | – | – | – | 1.000 | 0.000 | – | 1000/s | 800/s | 80% |")
	// Stores whose CPU was not measured fail the target, not pass it at 0.
	delete(b.Lean.CPUSeconds, CPURedis)
	out.Reset()
	b.WriteTable(&out)
	require.Contains(t, out.String(), "| fcfs-rush Postgres + Redis CPU per write (deferred tasks in) ÷ lean's | NaN× | < 0.20× | NOT met |")
	require.NotContains(t, out.String(), "Hot rows", "no hot-row part measured")

	// With the cart part, its section follows the targets and its CPU lines
	// follow the first-come-first-served ones in the same table.
	cart := &CartReport{Options: 5, StockPerOption: 300, Carts: 3000}
	b.CartBaseline = rep(map[string]float64{CPUTotal: 3}, 3000, 2000)
	b.CartRush = rep(map[string]float64{CPUTotal: 6}, 3000, 500)
	b.CartBaseline.Cart, b.CartRush.Cart = cart, cart
	out.Reset()
	b.WriteTable(&out)
	require.Contains(t, out.String(), "| invariant violations (holdfast, lean) | 0.00 | < 1.00 | met |\n\nHot rows")
	require.Contains(t, out.String(), "| … all in: the run and its deferred tasks | 4.500 | – | – | 0.300 | – | 0.200 | – | 444/s | – | – |\n"+
		"| synchronous cart reserve | 1.000 | – | – | – | – | – | – | 2000/s | 2000/s | 100% |\n"+
		"| holdfast cart-rush (reserve + outcome) | 2.000 | – | – | – | – | – | – | 1000/s | 500/s | 50% |\n\nfcfs-rush ended with 600")
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

// The cart section puts holdfast's cart-rush beside the synchronous
// reserve: rates, their ratio, latencies, carts, oversold units and
// duplicates, and each one's CPU per reserve; a run of the cart part alone
// has no first-come-first-served lines, and a violation fails the table.
func TestBenchCartTable(t *testing.T) {
	cart := &CartReport{Options: 5, StockPerOption: 300, Carts: 3000, UnitsAsked: 4500,
		CartsReserved: 1000, CartsRefused: 2000, UnitsReserved: 1500, UnitsTold: 1500}
	sync := &Report{Journeys: 3000, Concurrency: 200, CompletedPerSec: 2000, OK: true, Cart: cart,
		ClientRoundTrip: Percentiles{P50: 80, P99: 250},
		CPUSeconds:      map[string]float64{CPUTotal: 3, CPULoadTool: 0.3, "api": 0.9, CPUPostgres: 1.8}}
	rush := &Report{Journeys: 3000, Concurrency: 200, CompletedPerSec: 500, OK: true, Cart: cart,
		ClientRoundTrip: Percentiles{P50: 300, P99: 1000}, AcceptToDone: Percentiles{P50: 250, P99: 900},
		PeakRSSMiB: map[string]float64{"api": 80, "worker": 30},
		CPUSeconds: map[string]float64{CPUTotal: 6, CPULoadTool: 0.6, "api": 1.5, "worker": 1.5, CPUPostgres: 1.2, CPURedis: 1.2},
		Deferred:   &Deferred{Tasks: 2400, CPUSeconds: map[string]float64{CPUTotal: 0.48, "worker": 0.3, CPURedis: 0.18}}}
	b := Bench{Machine: "test", Cores: 2, CartRush: rush, CartBaseline: sync}
	var out bytes.Buffer
	require.False(t, b.WriteTable(&out), "a quarter of the synchronous rate, and p99 900 ms, miss the targets")
	table := out.String()
	require.Contains(t, table, "| cart-rush (5 options): reserves/s | 2000 | 500 | 0.25× | ≥ 2.00× | NOT met | – | – | – | – | not run |")
	require.Contains(t, table, "| cart-rush accept→terminal p99, local commits | 900.00 ms | < 500.00 ms | NOT met |")
	require.Contains(t, table, "Cart rush (seed 002's order reserve): 3000 users with carts of one or two of 5 options of 300 units (4500 units asked for, 1500 exist), 200 clients")
	require.Contains(t, table, "| synchronous: one transaction per request, the cart's options locked FOR UPDATE | local commits | 2000 | 80.0 / 250.0 | 1000 / 2000 | 1500 of 1500 | 0 | 0 | OK |")
	require.Contains(t, table, "| holdfast cart-rush: reserve, then its outcome (accept→terminal 250.0 / 900.0 ms) | local commits | 500 | 300.0 / 1000.0 | 1000 / 2000 | 1500 of 1500 | 0 | 0 | OK |")
	require.Contains(t, table, "| (no target) cart-rush p99 ÷ synchronous p99, local commits | 4.00× | – | – |")
	require.Contains(t, table, "| invariant violations (cart-rush, synchronous cart), local commits | 0.00 | < 1.00 | met |")
	// 3 s for 3,000 reserves: 1 ms each, so 2 cores allow 2,000/s.
	require.Contains(t, table, "| synchronous cart reserve | 1.000 | 0.100 | 0.300 | – | 0.600 | – | – | 2000/s | 2000/s | 100% |")
	require.Contains(t, table, "| holdfast cart-rush (reserve + outcome) | 2.000 | 0.200 | 0.500 | 0.500 | 0.400 | 0.400 | – | 1000/s | 500/s | 50% |\n"+
		"| … its deferred no-op tasks left at its end, run after it | 0.160 | – | – | 0.100 | – | 0.060 | – | 12500/s | – | – |")
	require.Contains(t, table, "cart-rush ended with 2400 of its 3000 tasks deferred, their requests left to the drains of their users' and options' keys (K1, K4), 0.200 ms of CPU each,")
	require.NotContains(t, table, "fcfs")
	require.NotContains(t, table, "floor")
	require.True(t, strings.HasPrefix(table, "make bench — test\n\nHot rows"))
	require.Contains(t, table, "| cart-rush (5 options): reserves/s | 2000 | 500 | 0.25× | ≥ 2.00× | NOT met | – | – | – | – | not run |\n\nCart rush")

	fast := *rush
	fast.CompletedPerSec, fast.AcceptToDone.P99 = 4000, 400
	b.CartRush = &fast
	out.Reset()
	require.True(t, b.WriteTable(&out), "twice the synchronous rate at p99 400 ms meets them")
	require.Contains(t, out.String(), "| cart-rush (5 options): reserves/s | 2000 | 4000 | 2.00× | ≥ 2.00× | met |")
	require.Contains(t, out.String(), "| cart-rush accept→terminal p99, local commits | 400.00 ms | < 500.00 ms | met |")

	b.CartRush = rush
	rush.CompletedPerSec, rush.AcceptToDone.P99 = 4000, 400
	rush.OK, rush.Violations = false, []string{"option 1 oversold"}
	rush.Cart = &CartReport{Options: 5, StockPerOption: 300, CartsReserved: 1001, OversoldUnits: 1}
	out.Reset()
	require.False(t, b.WriteTable(&out), "a violation fails the table")
	require.Contains(t, out.String(), "| 1001 / 0 | 0 of 1500 | 1 | 0 | 1 VIOLATIONS |")
}

// The order check must be able to fail, and must not flag requests that
// overlapped in time.
func TestOrderBookFindsRealTimeInversions(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	var ok orderBook
	ok.add(ordered{user: "a", sent: at(0), acked: at(10), seat: 1})
	ok.add(ordered{user: "b", sent: at(20), acked: at(30), seat: 2})
	ok.add(ordered{user: "c", sent: at(5), acked: at(40), seat: 3})  // after a, concurrent with b
	ok.add(ordered{user: "d", sent: at(25), acked: at(26), seat: 2}) // concurrent with b: no order between them
	ok.add(ordered{user: "e", sent: at(50), acked: at(60), soldOut: true})
	v, pairs, checked := ok.violations()
	require.Empty(t, v)
	require.Zero(t, pairs)
	require.EqualValues(t, 2, checked, "b after a, d after a, c after none; e got no seat")

	var bad orderBook
	bad.add(ordered{user: "a", sent: at(0), acked: at(10), seat: 5})
	bad.add(ordered{user: "b", sent: at(20), acked: at(30), seat: 4}) // sent after a's 202, lower seat
	bad.add(ordered{user: "c", sent: at(0), acked: at(12), soldOut: true})
	bad.add(ordered{user: "d", sent: at(13), acked: at(35), seat: 9}) // sent after c was told SOLD_OUT
	v, pairs, _ = bad.violations()
	require.Equal(t, 2, pairs, "%v", v)
	all := strings.Join(v, "\n")
	require.Contains(t, all, "a had its 202 before b sent its request, but got seat 5 against its 4")
	require.Contains(t, all, "c had its 202 before d sent its request, but was told SOLD_OUT while it got seat 9")
}
