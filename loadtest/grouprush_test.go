package loadtest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/bench/baseline"
	"github.com/holdfast/holdfast/internal/systest"
)

// A fan's group depends on the seed and the fan alone, so group-rush and
// baseline-group-rush run the same fans: one to six seats, drawn evenly,
// and two thirds of the granted holds confirmed.
func TestGroupChoicesDependOnSeedAndFanOnly(t *testing.T) {
	sizes, confirms := make([]int, groupMaxSize+1), 0
	for i := range 6000 {
		ch := groupChoiceOf(1, i)
		require.Equal(t, ch, groupChoiceOf(1, i))
		require.True(t, ch.size >= 1 && ch.size <= groupMaxSize)
		sizes[ch.size]++
		if ch.confirm {
			confirms++
		}
	}
	for _, n := range sizes[1:] {
		require.InDelta(t, 1000, n, 120)
	}
	require.InDelta(t, 4000, confirms, 150)
	differ := 0
	for i := range 100 {
		if groupChoiceOf(1, i) != groupChoiceOf(2, i) {
			differ++
		}
	}
	require.Greater(t, differ, 50, "another seed, other fans")
}

// The default map is 10 sections of 20 rows of 50 seats; a small one has
// two sections still, and every map has exactly the seats asked for.
func TestGroupMap(t *testing.T) {
	m := groupMap(10_000)
	require.Len(t, m, 10)
	for _, s := range m {
		require.Len(t, s.Rows, 20)
		for _, r := range s.Rows {
			require.Equal(t, 50, r.Seats)
		}
	}
	for _, seats := range []int{1, 100, 241, 1999, 2001} {
		total := 0
		for _, s := range groupMap(seats) {
			for _, r := range s.Rows {
				total += r.Seats
			}
		}
		require.Equal(t, seats, total)
	}
	require.Len(t, groupMap(240), 2)
}

// The group checks must be able to fail: a clean end of a small rush
// passes them, and each corruption of it is found.
func TestGroupCheckFindsViolations(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	sec := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	clean := func() (*groupBook, *groupSnapshot) {
		b := newGroupBook(1, 3, 6, 10)
		b.told = map[int64]*toldHold{
			1: {user: "a", seats: []int64{1, 2}, confirm: true, confirmed: true},
			2: {user: "b", seats: []int64{3}},                                    // let expire
			3: {user: "c", seats: []int64{3, 4}, confirm: true, confirmed: true}, // after 2 expired
		}
		p := func(v int64) *int64 { return &v }
		s := &groupSnapshot{total: 6, holdSeconds: 10, remaining: 2, seatsTaken: p(4), seats: map[int64]*snapSeat{
			1: {section: "S1", rowNo: 0, pos: 1, taken: true, holdID: p(1)}, 2: {section: "S1", rowNo: 0, pos: 2, taken: true, holdID: p(1)},
			3: {section: "S1", rowNo: 0, pos: 3, taken: true, holdID: p(3)}, 4: {section: "S1", rowNo: 0, pos: 4, taken: true, holdID: p(3)},
			5: {section: "S1", rowNo: 1, pos: 1}, 6: {section: "S2", rowNo: 0, pos: 1},
		}, holds: map[int64]*snapHold{
			1: {user: "a", seats: []int64{1, 2}, status: "CONFIRMED", created: sec(0), expires: sec(10)},
			2: {user: "b", seats: []int64{3}, status: "EXPIRED", created: sec(1), expires: sec(11)},
			3: {user: "c", seats: []int64{3, 4}, status: "CONFIRMED", created: sec(11), expires: sec(21)},
		}}
		return b, s
	}
	b, s := clean()
	v, r := b.checkGroup(s)
	require.Empty(t, v)
	require.Equal(t, 4, r.SeatsSold)
	require.Equal(t, 1, r.HoldsExpired)
	require.Equal(t, 1, r.SeatsReheld)

	for _, c := range []struct {
		name    string
		corrupt func(*groupBook, *groupSnapshot)
		want    string
	}{
		{"a seat given again before its hold expired", func(_ *groupBook, s *groupSnapshot) { s.holds[3].created = sec(5) },
			"seat 3 is in holds 2 and 3 at once"},
		{"a group split over two rows", func(_ *groupBook, s *groupSnapshot) { s.seats[2].rowNo = 1 },
			"hold 1's seats [1 2] are not side by side in one row"},
		{"a confirmed seat freed", func(_ *groupBook, s *groupSnapshot) { s.seats[4].taken, s.seats[4].holdID = false, nil },
			"seat 4 of live hold 3 is free"},
		{"a seat taken by no one", func(_ *groupBook, s *groupSnapshot) { s.seats[5].taken = true },
			"seat 5 is taken (by hold none) but no live hold or order holds it"},
		{"a hold still held past its time", func(_ *groupBook, s *groupSnapshot) { s.holds[2].status = "HELD" },
			"hold 2 is HELD, want EXPIRED"},
		{"a hold that expired late", func(_ *groupBook, s *groupSnapshot) { s.holds[2].expires = sec(12) },
			"hold 2 lasts 11s, not the event's 10 s"},
		{"a count off by one", func(_ *groupBook, s *groupSnapshot) { *s.seatsTaken = 5 },
			"the event counts 5 seats taken; 4 are"},
		{"the public count off", func(_ *groupBook, s *groupSnapshot) { s.remaining = 3 },
			"the public event shows 3 seats remaining; 4 of 6 are taken"},
		{"seats other than told", func(b *groupBook, _ *groupSnapshot) { b.told[1].seats = []int64{5, 6} },
			"hold 1: a was told seats [5 6]; the tables have a with [1 2]"},
		{"a hold no one was told of", func(b *groupBook, _ *groupSnapshot) { delete(b.told, 2) },
			"hold 2 of b is in the tables; no client was told of it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, s := clean()
			c.corrupt(b, s)
			v, _ := b.checkGroup(s)
			require.Contains(t, v, c.want)
		})
	}
}

// The group rush on both designs, small, against real servers: every fan
// is granted a group side by side or refused SOLD_OUT or
// SEATS_NOT_TOGETHER, and the checks of the tables pass once the last
// holds have expired (1 s) and, in holdfast, been swept (every second).
func TestGroupRushOnBothDesigns(t *testing.T) {
	t.Parallel()
	const fans, seats = 400, 240
	rush := func(t *testing.T, scenario string, opt Options) *Report {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		opt.Users, opt.Seats, opt.SeatHoldSeconds, opt.Concurrency = fans, seats, 1, 20
		rep, err := Run(ctx, scenario, opt)
		require.NoError(t, err)
		require.True(t, rep.OK, "%v", rep.Violations)
		g := rep.Group
		t.Logf("%+v; outcomes %v", *g, rep.Outcomes)
		require.Equal(t, fans, g.Granted+g.SoldOut+g.NotTogether)
		require.Equal(t, g.Granted, g.Confirmed+g.ConfirmsRefused+g.LetExpire)
		require.Positive(t, g.Confirmed)
		require.Positive(t, g.SoldOut+g.NotTogether, "%d seats asked of %d", g.SeatsAsked, seats)
		require.Zero(t, g.DoubleHeld+g.NotSideBySide)
		return rep
	}
	t.Run("synchronous", func(t *testing.T) {
		t.Parallel()
		url, dbURL := startBaseline(t, baseline.Group)
		rush(t, "baseline-group-rush", Options{BaseURL: url, Secret: "x", DatabaseURL: dbURL})
	})
	t.Run("holdfast", func(t *testing.T) {
		t.Parallel()
		s := systest.Start(t, systest.Options{Workers: 1, Overrides: []string{"RATE_LIMIT_PER_USER", "0", "EVENTS_RECONCILE_INTERVAL", "1s"}})
		rush(t, "group-rush", Options{BaseURL: s.URL, Secret: s.Cfg.JWTSecret, DatabaseURL: s.Cfg.DatabaseURL, PreferWait: 10 * time.Second})
	})
}

// The group section puts holdfast's group-rush beside the synchronous
// design: fans/s and their ratios (no target yet), latencies, what the
// holds came to and each one's CPU per fan; a run of the group part alone
// has no other section.
func TestBenchGroupTable(t *testing.T) {
	g := &GroupReport{Sections: 10, Seats: 10000, Fans: 20000, HoldSeconds: 10, SeatsAsked: 70000, Granted: 3000, SoldOut: 15000,
		NotTogether: 2000, Confirmed: 2000, LetExpire: 1000, SeatsSold: 7000, SeatsReheld: 3500}
	run := func(scenario string, secs, p99 float64) *Report {
		return &Report{Scenario: scenario, Journeys: 20000, Seconds: secs, Concurrency: 200, CompletedPerSec: 22000 / secs, OK: true, Group: g,
			ClientRoundTrip: Percentiles{P50: 10, P99: p99}, CPUSeconds: map[string]float64{CPUTotal: 20, "api": 10, CPUPostgres: 8}}
	}
	b := Bench{Machine: "test", Cores: 2, GroupBaseline: run("baseline-group-rush", 10, 100), GroupRush: run("group-rush", 40, 800)}
	var out bytes.Buffer
	require.True(t, b.WriteTable(&out), "no target, no violation")
	table := out.String()
	require.Contains(t, table, "make bench — test\n\nGroup rush (best-available seats for groups): 20000 fans, each asking for 1–6 seats")
	require.Contains(t, table, "| synchronous: one transaction per request, a row of the map locked FOR UPDATE SKIP LOCKED | 2000 | 300 | 2200 | 10.0 / 100.0 | "+
		"3000 / 15000 / 2000 | 2000 / 0 | 1000 | 7000 | 3500 | 0 / 0 | OK |")
	require.Contains(t, table, "| (no target) group-rush fans/s ÷ synchronous | 0.25× | – | – |")
	require.Contains(t, table, "| (no target) group-rush holds granted/s ÷ synchronous | 0.25× | – | – |")
	require.Contains(t, table, "| synchronous group rush, per fan | 1.000 | – | 0.500 | – | 0.400 | – | – | 2000/s | 2000/s | 100% |")
	require.Contains(t, table, "| holdfast group-rush, per fan (writes + outcomes) | 1.000 |")
	require.NotContains(t, table, "Hold storm")

	b.GroupRush.OK, b.GroupRush.Violations = false, []string{"seat 3 is in holds 2 and 3 at once"}
	out.Reset()
	require.False(t, b.WriteTable(&out), "a violation fails the table")
	require.Contains(t, out.String(), "| 1 VIOLATIONS |")
}
