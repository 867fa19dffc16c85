package loadtest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/client"
)

// The group rush's checks read the design's tables once every hold the
// rush made has expired or been confirmed, and hold them to what the
// clients were told:
//
//   - no seat is in two live holds or orders at once, over the whole run:
//     each hold occupies its seats from its creation until it expired (its
//     expires_at), was released, or forever once confirmed, and no two
//     occupations of a seat overlap;
//   - every hold's seats are side by side in one row: one section, one
//     row, consecutive positions, as many as the fan asked for; a fan not
//     granted one was refused SOLD_OUT or SEATS_NOT_TOGETHER (anything else
//     ends its journey in an error);
//   - every hold a client was told of is there, the fan's, with the seats
//     it was told, and none other is; a confirmed one is CONFIRMED and
//     holds its seats; one let expire (or whose confirm came too late)
//     expired exactly seatHoldSeconds after its creation, and its seats are
//     free or held by a hold made after that;
//   - a seat is taken exactly when a live hold or order holds it;
//   - the counts are exact: the event's count of taken seats (holdfast's
//     events.seats_taken) is the taken seats, and the public event's
//     remainingSeats is total − taken.

// groupTables reads a design's seats and holds of an event. holdfast's
// are the worker's own; the baseline's (bench/baseline/group.go) keep
// holdfast's table names and judge a hold by its expires_at, with no
// sweeper, so settled and the readers there turn a hold past its time
// into an expired one. Each query takes the event ($1) and, the
// baseline's, the snapshot's time ($2).
type groupTables struct {
	name    string
	settled string // count of holds still to expire, or to be swept
	event   string // total seats, the count of seats taken (NULL: none kept), seatHoldSeconds
	seats   string // id, section, row_no, pos, taken, the hold taking it
	holds   string // id, user_id, seat_ids, status, created_at, expires_at, updated_at
	// remaining counts the seats a public read of the event shows left,
	// where the design has no public read (holdfast's is its API's).
	remaining string
}

var holdfastTables = groupTables{
	name:    "holdfast",
	settled: `SELECT count(*) FROM seat_holds WHERE event_id = $1 AND status = 'HELD'`,
	event:   `SELECT total_seats, seats_taken, seat_hold_seconds FROM events WHERE id = $1`,
	seats:   `SELECT id, section, row_no, pos, reserved, hold_id FROM seats WHERE event_id = $1`,
	holds:   `SELECT id, user_id, seat_ids, status, created_at, expires_at, updated_at FROM seat_holds WHERE event_id = $1`,
}

var baselineTables = groupTables{
	name:    "baseline",
	settled: `SELECT count(*) FROM seat_holds WHERE event_id = $1 AND status = 'HELD' AND expires_at > $2`,
	event:   `SELECT total_seats, NULL::bigint, seat_hold_seconds FROM events WHERE id = $1`,
	seats: `SELECT id, section, row_no, pos, sold OR held_until > $2, CASE WHEN sold OR held_until > $2 THEN hold_id END
		FROM seats WHERE event_id = $1`,
	holds: `SELECT id, user_id, seat_ids, CASE WHEN status = 'HELD' AND expires_at <= $2 THEN 'EXPIRED' ELSE status END,
		created_at, expires_at, updated_at FROM seat_holds WHERE event_id = $1`,
	remaining: `SELECT count(*) FROM seats WHERE event_id = $1 AND NOT sold AND (held_until IS NULL OR held_until <= $2)`,
}

// snapSeat and snapHold are a seat and a hold as the tables hold them.
type snapSeat struct {
	section    string
	rowNo, pos int
	taken      bool
	holdID     *int64
}

type snapHold struct {
	user                        string
	seats                       []int64
	status                      string // HELD, CONFIRMED, RELEASED, EXPIRED
	created, expires, updatedAt time.Time
}

// groupSnapshot is a design's tables for an event at one time, and the
// public event's remainingSeats.
type groupSnapshot struct {
	total, holdSeconds, remaining int
	seatsTaken                    *int64 // nil: the design keeps no count
	seats                         map[int64]*snapSeat
	holds                         map[int64]*snapHold
}

// settleTimeout bounds the wait for the last holds to expire and be swept:
// their time, then a sweep (holdfast's EVENTS_RECONCILE_INTERVAL, 10 s).
const settleTimeout = time.Minute

// checkTables waits until every hold of the rush has expired (and, in
// holdfast, been swept) or been confirmed, reads the design's tables and
// its remaining seats (t.remaining, else the public event through api),
// and checks them (checkGroup).
func (b *groupBook) checkTables(ctx context.Context, databaseURL string, t groupTables, api *client.Client) ([]string, *GroupReport, error) {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return nil, nil, fmt.Errorf("group check: %w", err)
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(time.Duration(b.report.HoldSeconds)*time.Second + settleTimeout)
	for {
		var open int
		if err := conn.QueryRow(ctx, t.settled, args(t.settled, b.eventID, time.Now())...).Scan(&open); err != nil {
			return nil, nil, fmt.Errorf("group check: %w", err)
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			return []string{fmt.Sprintf("%d holds still held %d s after the last journey, the holds lasting %d s",
				open, b.report.HoldSeconds+int(settleTimeout.Seconds()), b.report.HoldSeconds)}, &b.report, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	snap, err := readGroupSnapshot(ctx, conn, t, b.eventID)
	if err != nil {
		return nil, nil, fmt.Errorf("group check, %s tables: %w", t.name, err)
	}
	taken := snap.takenSeats()
	// The public count follows the last sweep's commit: give it a moment.
	for range 20 {
		if snap.remaining, err = remaining(ctx, conn, t, api, b.eventID); err != nil {
			return nil, nil, err
		}
		if snap.remaining == snap.total-taken {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, r := b.checkGroup(snap)
	return out, r, nil
}

// remaining is the event's remaining seats, read with t.remaining or, for
// a design without it, from the public event through api.
func remaining(ctx context.Context, conn *pgx.Conn, t groupTables, api *client.Client, ev int64) (n int, err error) {
	if t.remaining != "" {
		err = conn.QueryRow(ctx, t.remaining, ev, time.Now()).Scan(&n)
		return n, err
	}
	pub, err := api.PublicEvent(ctx, ev)
	return pub.RemainingSeats, err
}

func readGroupSnapshot(ctx context.Context, conn *pgx.Conn, t groupTables, ev int64) (*groupSnapshot, error) {
	s := &groupSnapshot{seats: map[int64]*snapSeat{}, holds: map[int64]*snapHold{}}
	var now time.Time
	if err := conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return nil, err
	}
	if err := conn.QueryRow(ctx, t.event, args(t.event, ev, now)...).Scan(&s.total, &s.seatsTaken, &s.holdSeconds); err != nil {
		return nil, fmt.Errorf("event: %w", err)
	}
	rows, err := conn.Query(ctx, t.seats, args(t.seats, ev, now)...)
	if err != nil {
		return nil, fmt.Errorf("seats: %w", err)
	}
	var id int64
	var st snapSeat
	if _, err := pgx.ForEachRow(rows, []any{&id, &st.section, &st.rowNo, &st.pos, &st.taken, &st.holdID}, func() error {
		c := st
		s.seats[id] = &c
		return nil
	}); err != nil {
		return nil, fmt.Errorf("seats: %w", err)
	}
	rows, err = conn.Query(ctx, t.holds, args(t.holds, ev, now)...)
	if err != nil {
		return nil, fmt.Errorf("holds: %w", err)
	}
	var h snapHold
	if _, err := pgx.ForEachRow(rows, []any{&id, &h.user, &h.seats, &h.status, &h.created, &h.expires, &h.updatedAt}, func() error {
		c := h
		s.holds[id] = &c
		return nil
	}); err != nil {
		return nil, fmt.Errorf("holds: %w", err)
	}
	return s, nil
}

// args are a table query's arguments: the event, and the time when the
// query takes one ($2).
func args(query string, ev int64, now time.Time) []any {
	if strings.Contains(query, "$2") {
		return []any{ev, now}
	}
	return []any{ev}
}

func (s *groupSnapshot) takenSeats() int {
	n := 0
	for _, st := range s.seats {
		if st.taken {
			n++
		}
	}
	return n
}

// occupation is a hold's time on a seat: from its creation until it
// expired or was released, or for good once confirmed.
type occupation struct {
	hold       int64
	from, till time.Time
	forever    bool
}

func (o occupation) overlaps(p occupation) bool {
	return (o.forever || p.from.Before(o.till)) && (p.forever || o.from.Before(p.till))
}

func (h *snapHold) occupation(id int64) occupation {
	switch h.status {
	case "CONFIRMED":
		return occupation{hold: id, from: h.created, forever: true}
	case "RELEASED":
		return occupation{hold: id, from: h.created, till: h.updatedAt}
	}
	return occupation{hold: id, from: h.created, till: h.expires}
}

// live reports whether hold h holds its seats at the end (every hold of
// the rush has expired or been confirmed by then).
func (h *snapHold) live() bool { return h.status == "CONFIRMED" || h.status == "HELD" }

// checkGroup holds the snapshot to the rules above and to what the
// clients were told, and completes the report.
func (b *groupBook) checkGroup(s *groupSnapshot) ([]string, *GroupReport) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.report
	var bad violations
	ids := slices.Sorted(func(yield func(int64) bool) {
		for id := range s.holds {
			if !yield(id) {
				return
			}
		}
	})
	bySeat := map[int64][]occupation{}
	for _, id := range ids {
		h := s.holds[id]
		if h.status == "EXPIRED" {
			r.HoldsExpired++
		}
		if !s.sideBySide(h.seats) {
			r.NotSideBySide++
			bad.add("hold %d's seats %v are not side by side in one row", id, h.seats)
		}
		for _, seat := range h.seats {
			bySeat[seat] = append(bySeat[seat], h.occupation(id))
		}
		b.checkTold(&bad, s, id, h)
	}
	r.DoubleHeld, r.SeatsReheld = checkOccupations(&bad, bySeat)
	for id, t := range b.told {
		if _, ok := s.holds[id]; !ok {
			bad.add("hold %d of %s (seats %v) is not in the tables", id, t.user, t.seats)
		}
	}
	taken := checkSeats(&bad, s)
	r.SeatsSold = taken
	if s.total != len(s.seats) {
		bad.add("the event has %d seats, its total says %d", len(s.seats), s.total)
	}
	if s.seatsTaken != nil && *s.seatsTaken != int64(taken) {
		bad.add("the event counts %d seats taken; %d are", *s.seatsTaken, taken)
	}
	if s.remaining != s.total-taken {
		bad.add("the public event shows %d seats remaining; %d of %d are taken", s.remaining, taken, s.total)
	}
	return bad.all(), &r
}

// sideBySide reports whether seats are in one section and row, at
// consecutive positions.
func (s *groupSnapshot) sideBySide(seats []int64) bool {
	pos := make([]int, 0, len(seats))
	var first *snapSeat
	for _, id := range seats {
		st, ok := s.seats[id]
		if !ok {
			return false
		}
		if first == nil {
			first = st
		}
		if st.section != first.section || st.rowNo != first.rowNo {
			return false
		}
		pos = append(pos, st.pos)
	}
	sort.Ints(pos)
	for i := 1; i < len(pos); i++ {
		if pos[i] != pos[i-1]+1 {
			return false
		}
	}
	return len(pos) > 0
}

// checkTold holds hold id to what its fan was told: the fan's, with the
// seats told; confirmed if the fan was told so, else expired exactly
// seatHoldSeconds after its creation.
func (b *groupBook) checkTold(bad *violations, s *groupSnapshot, id int64, h *snapHold) {
	t, ok := b.told[id]
	if !ok {
		bad.add("hold %d of %s is in the tables; no client was told of it", id, h.user)
		return
	}
	if t.user != h.user || !slices.Equal(slices.Sorted(slices.Values(t.seats)), slices.Sorted(slices.Values(h.seats))) {
		bad.add("hold %d: %s was told seats %v; the tables have %s with %v", id, t.user, t.seats, h.user, h.seats)
	}
	want := "EXPIRED"
	if t.confirmed {
		want = "CONFIRMED"
	}
	if h.status != want {
		bad.add("hold %d is %s, want %s", id, h.status, want)
	}
	if life := h.expires.Sub(h.created); life < time.Duration(s.holdSeconds)*time.Second-time.Millisecond ||
		life > time.Duration(s.holdSeconds)*time.Second+time.Millisecond {
		bad.add("hold %d lasts %s, not the event's %d s", id, life, s.holdSeconds)
	}
}

// checkOccupations finds seats occupied by two holds at once, and counts
// the seats held again after a hold of theirs ended.
func checkOccupations(bad *violations, bySeat map[int64][]occupation) (double, reheld int) {
	for seat, occ := range bySeat {
		if len(occ) > 1 {
			reheld++
		}
		sort.Slice(occ, func(i, j int) bool { return occ[i].from.Before(occ[j].from) })
		for i := 1; i < len(occ); i++ {
			if occ[i-1].overlaps(occ[i]) {
				double++
				bad.add("seat %d is in holds %d and %d at once", seat, occ[i-1].hold, occ[i].hold)
			}
		}
	}
	return double, reheld
}

// checkSeats holds each seat's state to the holds: taken exactly when a
// live hold or order holds it, by that hold; it returns the seats taken.
func checkSeats(bad *violations, s *groupSnapshot) (taken int) {
	holder := map[int64]int64{}
	for id, h := range s.holds {
		if h.live() {
			for _, seat := range h.seats {
				holder[seat] = id
			}
		}
	}
	for id, st := range s.seats {
		h, held := holder[id]
		switch {
		case st.taken:
			taken++
			if !held || st.holdID == nil || *st.holdID != h {
				bad.add("seat %d is taken (by hold %v) but no live hold or order holds it", id, deref(st.holdID))
			}
		case held:
			bad.add("seat %d of live hold %d is free", id, h)
		}
	}
	return taken
}

func deref(p *int64) any {
	if p == nil {
		return "none"
	}
	return *p
}
