package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/requests"
)

// Task types and queue of events writes.
const (
	Queue    = "events"
	TypeFCFS = "seat.fcfs"
)

// FCFSPayload is a seat.fcfs request.
type FCFSPayload struct {
	EventID int64  `json:"eventId"`
	Phone   string `json:"phone,omitempty"`
}

// FCFSResult is a granted seat.
type FCFSResult struct {
	SeatID     int64  `json:"seatId"`
	ReservedBy string `json:"reservedBy"`
	Phone      string `json:"phone,omitempty"`
}

// FCFS applies first-come-first-served seat grabs in the worker.
type FCFS struct {
	// LockWait is how long a request may wait for its event before it is
	// refused with CONTENTION (the seed's retry limit, as SPEC §6 puts it).
	LockWait time.Duration
	// Outcomes counts results by outcome, as seed 004 §14 asks.
	Outcomes *prometheus.CounterVec
	// Counts, when set, has the event's copy set to the seats a batch left,
	// after commit.
	Counts *Counts
	// Room, when set, learns the seats left of an event that sold out
	// through seat holds (Room.SetLeft).
	Room *Room
}

// fcfsOutcomes are the outcome labels of holdfast_fcfs_total.
var fcfsOutcomes = []string{"success", "sold_out", "already_reserved", "contention", "not_found"}

// NewFCFS returns the FCFS writer with its counter, each outcome at 0.
func NewFCFS(lockWait time.Duration) *FCFS {
	f := &FCFS{LockWait: lockWait, Outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_fcfs_total", Help: "FCFS seat requests by outcome: success, sold_out, already_reserved, contention, not_found.",
	}, []string{"outcome"})}
	for _, o := range fcfsOutcomes {
		f.Outcomes.WithLabelValues(o)
	}
	return f
}

// Type is the FCFS write type.
func (f *FCFS) Type() keyed.Type {
	return keyed.Type{Name: TypeFCFS, Queue: Queue, Applier: keyed.ApplierFunc(f.apply)}
}

// apply hands out seats to a batch of requests on one event: the free seats
// are read once, in seat-id order, and given in seq order. The work is
// set-based, a fixed handful of statements per batch whatever its size: one
// read of the seats, one of who already holds a seat, then one update and one
// insert for all the grants.
func (f *FCFS) apply(ctx context.Context, tx pgx.Tx, b *keyed.Batch) ([]requests.Outcome, error) {
	outs := make([]requests.Outcome, len(b.Requests))
	payloads := make([]FCFSPayload, len(b.Requests))
	for i, r := range b.Requests {
		if err := json.Unmarshal(r.Payload, &payloads[i]); err != nil {
			outs[i] = requests.Failed("undecodable fcfs payload")
		}
	}
	// One key is one event, so a batch is one run; runs are handled in
	// order should a batch ever mix events.
	for start := 0; start < len(b.Requests); {
		end := start + 1
		for end < len(b.Requests) && payloads[end].EventID == payloads[start].EventID {
			end++
		}
		if err := f.applyRun(ctx, tx, b, payloads, outs, start, end); err != nil {
			return nil, err
		}
		start = end
	}
	return outs, nil
}

// applyRun applies requests [start, end) of b, all for one event.
func (f *FCFS) applyRun(ctx context.Context, tx pgx.Tx, b *keyed.Batch, payloads []FCFSPayload, outs []requests.Outcome, start, end int) error {
	eventID := payloads[start].EventID
	// Outcomes are counted once the batch has committed: a batch that rolls
	// back (fenced, retried, halved) must not count its requests twice.
	t := tally{}
	b.AfterCommit(func(context.Context) {
		for outcome, n := range t {
			f.Outcomes.WithLabelValues(outcome).Add(n)
		}
	})
	var users []string
	for i := start; i < end; i++ {
		if outs[i].Status == "" {
			users = append(users, b.Requests[i].UserID)
		}
	}
	if len(users) == 0 {
		return nil
	}
	free, taken, soldOut, err := f.load(ctx, tx, b, eventID, users)
	if errors.Is(err, pgx.ErrNoRows) {
		for i := start; i < end; i++ {
			if outs[i].Status == "" {
				outs[i] = t.reject("not_found", domain.CodeNotFound, "no such event")
			}
		}
		return nil
	}
	if err != nil {
		return err
	}
	g := f.assign(b.Requests[start:end], payloads[start:end], outs[start:end], b.Now, free, taken, t)
	if len(g.seats) == 0 {
		return nil
	}
	return f.reserve(ctx, tx, b, eventID, g, soldOut)
}

// tally counts a batch's outcomes by label.
type tally map[string]float64

// reject counts outcome and returns the rejection.
func (t tally) reject(outcome string, code, format string, args ...any) requests.Outcome {
	t[outcome]++
	return requests.Reject(code, format, args...)
}

// grant is the seats a run gives: seats[i] to holders[i], who gave phones[i].
type grant struct {
	seats           []int64
	holders, phones []string
}

// assign decides, in seq order, the open requests among rs (those
// whose outs are still empty): the free seats go one each to users holding
// none, until none is left.
func (f *FCFS) assign(rs []*requests.Request, payloads []FCFSPayload, outs []requests.Outcome, now time.Time, free []int64, taken map[string]int64, t tally) grant {
	var g grant
	for k, r := range rs {
		if outs[k].Status != "" {
			continue
		}
		p := payloads[k]
		if seat, ok := taken[r.UserID]; ok {
			outs[k] = requests.Rejected(domain.NewProblem(domain.CodeAlreadyReserved,
				"you already hold a seat for this event").WithMeta("seatId", seat))
			t["already_reserved"]++
			continue
		}
		if len(free) == 0 {
			outs[k] = t.reject("sold_out", domain.CodeSoldOut, "no seat is left")
			continue
		}
		// Only a request that would have got a seat is told it waited too long.
		if f.LockWait > 0 && now.Sub(r.AcceptedAt) > f.LockWait {
			outs[k] = t.reject("contention", domain.CodeContention,
				"the event was too busy to serve this request within %s; try again", f.LockWait)
			continue
		}
		var seat int64
		seat, free = free[0], free[1:]
		taken[r.UserID] = seat
		g.seats, g.holders, g.phones = append(g.seats, seat), append(g.holders, r.UserID), append(g.phones, p.Phone)
		outs[k] = requests.Succeeded(FCFSResult{SeatID: seat, ReservedBy: r.UserID, Phone: p.Phone})
		t["success"]++
	}
	return g
}

// reserve gives g's seats to their holders (with their phones), in one
// statement each, and has the event's count, and its room if it sold out
// through holds, follow once committed.
func (f *FCFS) reserve(ctx context.Context, tx pgx.Tx, b *keyed.Batch, eventID int64, g grant, soldOut bool) error {
	seats, holders, phones := g.seats, g.holders, g.phones
	// Seats are taken lowest id first, so every seat up to the last one
	// granted is taken: the next batch looks for free seats after it (the
	// free-seat index still holds the taken seats' entries until vacuum,
	// and walking past them from the start costs a rush more with every
	// batch). A hold released or expired lowers the mark (countSeats).
	var remaining int64
	if err := tx.QueryRow(ctx, `UPDATE events SET seats_taken = seats_taken + $2, fcfs_after = greatest(fcfs_after, $3)
		WHERE id = $1 RETURNING total_seats - seats_taken`, eventID, len(seats), seats[len(seats)-1]).Scan(&remaining); err != nil {
		return err
	}
	b.AfterCommit(func(ctx context.Context) {
		if f.Counts != nil {
			_ = f.Counts.Set(ctx, eventID, remaining)
		}
		if f.Room != nil && soldOut {
			_ = f.Room.SetLeft(ctx, eventID, remaining, true)
		}
	})
	if _, err := tx.Exec(ctx, `UPDATE seats SET reserved = true, updated_at = $2 WHERE id = ANY($1)`, seats, b.Now); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO seat_reservations (event_id, seat_id, user_id, phone, created_at)
		SELECT $1, s, u, nullif(p, ''), $5 FROM unnest($2::bigint[], $3::text[], $4::text[]) AS g(s, u, p)`,
		eventID, seats, holders, phones, b.Now)
	return err
}

// The batch's two reads. Each must cost the batch's size, whatever the
// event's: a rush runs thousands of batches, and a read that walks all the
// seats taken so far makes every batch slower than the last
// (TestFCFSReadsDoNotGrowWithSeatsTaken).
const (
	// freeSeatsSQL takes up to $2 free seats of event $1 after seat $3.
	freeSeatsSQL = `SELECT id FROM seats WHERE event_id = $1 AND NOT reserved AND id > $3 ORDER BY id LIMIT $2`
	// heldSeatsSQL finds which of users $2 hold a seat of event $1, with one
	// index probe per user. The plain "user_id = ANY($2)" lets the planner
	// scan every reservation of the event and compare each with the whole
	// array, which a plan cached while the table was small keeps doing all
	// through a rush: 25 ms a batch at 5,000 seats taken, most of Postgres'
	// CPU. LIMIT 1 keeps the lateral lookup a per-user probe.
	heldSeatsSQL = `SELECT u.user_id, r.seat_id FROM unnest($2::text[]) AS u(user_id)
		CROSS JOIN LATERAL (SELECT seat_id FROM seat_reservations
			WHERE event_id = $1 AND user_id = u.user_id LIMIT 1) AS r`
)

// load reads, for the users of a batch, up to one free seat each in seat-id
// order and the seats some of them already hold, and whether the event has
// sold out through seat holds. Seat holds past their time are expired
// first: their seats are free for this batch as for the holds' own.
// pgx.ErrNoRows means no such event.
func (f *FCFS) load(ctx context.Context, tx pgx.Tx, b *keyed.Batch, eventID int64, users []string) (
	free []int64, taken map[string]int64, soldOut bool, err error) {
	// Locked: a seat hold's release, in a batch or the periodic sweep,
	// lowers the mark.
	// Whether holds are due is asked in the same statement, so a batch of
	// an event with none costs no extra round trip.
	var after int64
	var due bool
	if err := tx.QueryRow(ctx, `SELECT fcfs_after, sold_out_at IS NOT NULL, EXISTS (SELECT 1 FROM seat_holds
			WHERE event_id = $1 AND status = 'HELD' AND expires_at <= $2)
		FROM events WHERE id = $1 FOR UPDATE`, eventID, b.Now).Scan(&after, &soldOut, &due); err != nil {
		return nil, nil, false, err
	}
	var expired []*hold
	var left int64
	if due {
		if expired, left, err = expireDue(ctx, tx, eventID, b.Now); err != nil {
			return nil, nil, false, err
		}
	}
	if len(expired) > 0 {
		after = min(after, slices.Min(seatsOf(expired))-1)
		b.AfterCommit(func(ctx context.Context) {
			if f.Counts != nil {
				_ = f.Counts.SetHolds(ctx, eventID, left, nil, expired)
			}
		})
	}
	rows, err := tx.Query(ctx, freeSeatsSQL, eventID, len(users), after)
	if err != nil {
		return nil, nil, false, fmt.Errorf("events: free seats: %w", err)
	}
	if free, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		return nil, nil, false, fmt.Errorf("events: free seats: %w", err)
	}
	rows, err = tx.Query(ctx, heldSeatsSQL, eventID, users)
	if err != nil {
		return nil, nil, false, fmt.Errorf("events: seats held: %w", err)
	}
	defer rows.Close()
	taken = map[string]int64{}
	for rows.Next() {
		var u string
		var s int64
		if err := rows.Scan(&u, &s); err != nil {
			return nil, nil, false, err
		}
		taken[u] = s
	}
	return free, taken, soldOut, rows.Err()
}
