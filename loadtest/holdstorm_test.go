package loadtest

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/bench/baseline"
	"github.com/holdfast/holdfast/client"
)

// A user's journey depends on the seed and the user alone, so hold-storm
// and baseline-hold-storm run the same ones: a room type, a start in the
// next two weeks, one to three nights, and a fate drawn evenly from four
// (two confirm, one cancels, one abandons).
func TestStormChoicesDependOnSeedAndUserOnly(t *testing.T) {
	fates := make([]int, 4)
	for i := range 2000 {
		ch := stormChoiceOf(1, i)
		require.Equal(t, ch, stormChoiceOf(1, i), "user %d", i)
		require.True(t, ch.roomType >= 0 && ch.roomType < stormRoomTypes)
		require.True(t, ch.start >= 1 && ch.start <= stormDays)
		require.True(t, ch.nights >= 1 && ch.nights <= 3)
		fates[ch.fate]++
	}
	for _, n := range fates {
		require.InDelta(t, 500, n, 80)
	}
	differ := 0
	for i := range 100 {
		if stormChoiceOf(1, i) != stormChoiceOf(2, i) {
			differ++
		}
	}
	require.Greater(t, differ, 50, "another seed, other journeys")
}

// The hold storm's checks must be able to fail: these feed them what an
// overselling or double-booking server would have told its clients and
// reported.
func TestStormBookFindsViolations(t *testing.T) {
	b := newStormBook(1, 4)
	b.rooms, b.roomTypes = 2, []int64{7}
	stay := func(id, room int64, user, in, out string) client.StayReservation {
		return client.StayReservation{ReservationID: id, RoomTypeID: 7, RoomID: room, UserID: user, CheckIn: in, CheckOut: out, Status: "Confirmed"}
	}
	night := func(date string, reserved, held int) client.Availability {
		return client.Availability{Date: date, RoomTypeID: 7, TotalRooms: 2, UnavailableRooms: reserved, HeldRooms: held,
			AvailableRooms: max(0, 2-reserved-held)}
	}
	b.confirmed(stay(1, 100, "a", "2030-01-01", "2030-01-03"))
	b.confirmed(stay(2, 101, "b", "2030-01-02", "2030-01-03"))
	b.stillHeld(client.Hold{HoldID: "h", RoomTypeID: 7, CheckIn: "2030-01-01", CheckOut: "2030-01-02"})
	v, r := b.check([]client.Availability{night("2030-01-01", 1, 1), night("2030-01-02", 2, 0)})
	require.Empty(t, v, "a clean run")
	require.Equal(t, HoldReport{RoomTypes: stormRoomTypes, RoomsPerType: stormRooms, Users: 4, Confirmed: 2,
		RoomNightsBooked: 3, HeldNightsTold: 1, HeldNightsSeen: 1}, *r)

	b.confirmed(stay(3, 100, "c", "2030-01-02", "2030-01-03")) // room 100 again on the 2nd, a third stay that night
	v, r = b.check([]client.Availability{night("2030-01-01", 1, 2), night("2030-01-02", 3, 0)})
	require.Equal(t, 1, r.DoubleBooked)
	require.Equal(t, 2, r.OversoldNights, "three stays on the 2nd; a stay and two holds on the 1st")
	require.ElementsMatch(t, []string{
		"room 100 booked twice on 2030-01-02 (a and c)",
		"room type 7 oversold on 2030-01-01: 1 stays told, 1 reserved and 2 held of 2 rooms",
		"room type 7 oversold on 2030-01-02: 3 stays told, 3 reserved and 0 held of 2 rooms",
	}, v)

	v, _ = b.check([]client.Availability{night("2030-01-01", 0, 0), night("2030-01-02", 3, 0)})
	require.Contains(t, v, "room type 7 on 2030-01-01: API shows 0 reserved, clients were told 1")
}

// The hold storm on the synchronous design, small, against a real server:
// its hotel written into the design's tables, every hold granted or refused
// NOT_AVAILABLE, and the checks of the nights there pass.
func TestBaselineHoldStorm(t *testing.T) {
	t.Parallel()
	url, dbURL := startBaseline(t, baseline.Holds)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, "baseline-hold-storm", Options{BaseURL: url, Secret: "x", DatabaseURL: dbURL, Users: 150, Concurrency: 20})
	require.NoError(t, err)
	require.True(t, rep.OK, "%v", rep.Violations)
	h := rep.Hold
	require.Equal(t, 150, h.HoldsGranted+h.HoldsRefused)
	require.Equal(t, h.HoldsGranted, h.Confirmed+h.ConfirmsRefused+h.Cancelled+h.Abandoned)
	require.Positive(t, h.Confirmed)
	require.Equal(t, h.HeldNightsTold, h.HeldNightsSeen, "every hold told of still counts, none other")
}

// The hold section puts holdfast's hold-storm beside the synchronous hold:
// journeys/s, their ratio, latencies, what the holds came to, and each
// one's CPU per journey; a run of the hold part alone has no other section.
func TestBenchHoldTable(t *testing.T) {
	hold := &HoldReport{RoomTypes: 10, RoomsPerType: 10, Users: 3000, HoldsGranted: 1000, HoldsRefused: 2000, Confirmed: 500,
		Cancelled: 250, Abandoned: 250, RoomNightsBooked: 1000, HeldNightsTold: 500, HeldNightsSeen: 500}
	sync := &Report{Scenario: "baseline-hold-storm", Journeys: 3000, Seconds: 2, Concurrency: 200, CompletedPerSec: 2000, OK: true, Hold: hold,
		ClientRoundTrip: Percentiles{P50: 50, P99: 200},
		CPUSeconds:      map[string]float64{CPUTotal: 3, CPULoadTool: 0.3, "api": 0.9, CPUPostgres: 1.8}}
	storm := &Report{Scenario: "hold-storm", Journeys: 3000, Seconds: 6, Concurrency: 200, CompletedPerSec: 650, OK: true, Hold: hold,
		ClientRoundTrip: Percentiles{P50: 250, P99: 800}, AcceptToDone: Percentiles{P50: 200, P99: 700},
		PeakRSSMiB: map[string]float64{"api": 80, "worker": 30},
		CPUSeconds: map[string]float64{CPUTotal: 6, CPULoadTool: 0.6, "api": 1.5, "worker": 1.5, CPUPostgres: 1.2, CPURedis: 1.2}}
	b := Bench{Machine: "test", Cores: 2, HoldStorm: storm, HoldBaseline: sync}
	var out bytes.Buffer
	require.False(t, b.WriteTable(&out), "a third of the synchronous rate at two thirds of its Postgres CPU misses both targets")
	table := out.String()
	require.Contains(t, table, "make bench — test\n\nHot rows")
	require.Contains(t, table, "| hold-storm: journeys/s | 1500 | 500 | 0.33× | ≥ 1.50× | NOT met | – | – | – | – | not run |\n"+
		"| hold-storm: Postgres CPU per journey, ms (deferred tasks in) | 0.600 | 0.400 | 0.67× | ≤ 0.50× | NOT met | – | – | – | – | not run |\n\n"+
		"Hold storm (seed 000's holds): 3000 users, each holding one of 10 room types of 10 rooms")
	require.Contains(t, table, "| synchronous: one transaction per request, the stay's stock rows locked FOR UPDATE | local commits | 1500 | 2000 | 50.0 / 200.0 | 1000 / 2000 | 500 / 0 | 250 / 250 | 1000 | 0 | 0 | OK |")
	require.Contains(t, table, "| holdfast hold-storm: each write, then its outcome (accept→terminal 200.0 / 700.0 ms) | local commits | 500 | 650 | 250.0 / 800.0 |")
	require.Contains(t, table, "| (no target) hold-storm write p99 ÷ synchronous p99, local commits | 4.00× | – | – |")
	require.Contains(t, table, "| (no target) hold-storm: held nights the clients still hold / the API counts, local commits | 500 / 500 | – | – |")
	// 3 s for 3,000 journeys: 1 ms each, so 2 cores allow 2,000/s.
	require.Contains(t, table, "| synchronous hold storm, per journey | 1.000 | 0.100 | 0.300 | – | 0.600 | – | – | 2000/s | 1500/s | 75% |")
	require.Contains(t, table, "| holdfast hold-storm, per journey (writes + outcomes) | 2.000 | 0.200 | 0.500 | 0.500 | 0.400 | 0.400 | – | 1000/s | 500/s | 50% |")
	require.NotContains(t, table, "Cart rush")
	require.NotContains(t, table, "fcfs")

	// Half the synchronous journeys' time at a quarter of their Postgres
	// CPU per journey meets both targets.
	storm.Seconds, storm.CPUSeconds[CPUPostgres] = 1.3, 0.45
	out.Reset()
	require.True(t, b.WriteTable(&out))
	require.Contains(t, out.String(), "| hold-storm: journeys/s | 1500 | 2308 | 1.54× | ≥ 1.50× | met |")
	require.Contains(t, out.String(), "| hold-storm: Postgres CPU per journey, ms (deferred tasks in) | 0.600 | 0.150 | 0.25× | ≤ 0.50× | met |")

	storm.OK, storm.Violations = false, []string{"room type 7 oversold"}
	out.Reset()
	require.False(t, b.WriteTable(&out), "a violation fails the table")
	require.Contains(t, out.String(), fmt.Sprintf("| %d VIOLATIONS |", 1))
}
