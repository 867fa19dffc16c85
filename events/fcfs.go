package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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
	// Counts, when set, has each batch's event recounted after commit.
	Counts *Counts
}

// NewFCFS returns the FCFS writer with its counter.
func NewFCFS(lockWait time.Duration) *FCFS {
	return &FCFS{LockWait: lockWait, Outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "holdfast_fcfs_total", Help: "FCFS seat requests by outcome: success, sold_out, already_reserved, contention.",
	}, []string{"outcome"})}
}

// Type is the FCFS write type.
func (f *FCFS) Type() keyed.Type {
	return keyed.Type{Name: TypeFCFS, Queue: Queue, Applier: keyed.ApplierFunc(f.apply)}
}

// apply hands out seats to a batch of requests on one event: the free seats
// are read once, in seat-id order, and given in acceptance order.
func (f *FCFS) apply(ctx context.Context, tx pgx.Tx, b *keyed.Batch) ([]requests.Outcome, error) {
	outs := make([]requests.Outcome, len(b.Requests))
	var eventID int64
	var free []int64
	taken := map[string]int64{} // user → seat, in this event
	for i, r := range b.Requests {
		var p FCFSPayload
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			outs[i] = requests.Failed("undecodable fcfs payload")
			continue
		}
		if eventID != p.EventID { // one key, one event; load it once
			var err error
			if eventID, free, err = f.load(ctx, tx, p.EventID, len(b.Requests)); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					outs[i] = f.reject("not_found", http.StatusNotFound, domain.CodeNotFound, "no such event")
					eventID = 0
					continue
				}
				return nil, err
			}
		}
		seat, ok := taken[r.UserID]
		if !ok {
			err := tx.QueryRow(ctx, `SELECT seat_id FROM seat_reservations WHERE event_id = $1 AND user_id = $2`, p.EventID, r.UserID).Scan(&seat)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return nil, err
			}
			ok = err == nil
		}
		if ok {
			outs[i] = requests.Rejected(domain.NewProblem(http.StatusConflict, domain.CodeAlreadyReserved,
				"you already hold a seat for this event").WithMeta("seatId", seat))
			f.Outcomes.WithLabelValues("already_reserved").Inc()
			continue
		}
		if len(free) == 0 {
			outs[i] = f.reject("sold_out", http.StatusConflict, domain.CodeSoldOut, "no seat is left")
			continue
		}
		// Only a request that would have got a seat is told it waited too long.
		if f.LockWait > 0 && b.Now.Sub(r.AcceptedAt) > f.LockWait {
			outs[i] = f.reject("contention", http.StatusConflict, domain.CodeContention,
				"the event was too busy to serve this request within %s; try again", f.LockWait)
			continue
		}
		seat, free = free[0], free[1:]
		if _, err := tx.Exec(ctx, `UPDATE seats SET reserved = true, updated_at = $2 WHERE id = $1`, seat, b.Now); err != nil {
			return nil, err
		}
		var phone *string
		if p.Phone != "" {
			phone = &p.Phone
		}
		if _, err := tx.Exec(ctx, `INSERT INTO seat_reservations (event_id, seat_id, user_id, phone, created_at)
			VALUES ($1, $2, $3, $4, $5)`, p.EventID, seat, r.UserID, phone, b.Now); err != nil {
			return nil, err
		}
		taken[r.UserID] = seat
		outs[i] = requests.Succeeded(FCFSResult{SeatID: seat, ReservedBy: r.UserID, Phone: p.Phone})
		f.Outcomes.WithLabelValues("success").Inc()
	}
	if f.Counts != nil && eventID != 0 {
		ev := eventID
		b.AfterCommit(func(ctx context.Context) { _, _ = f.Counts.Recount(ctx, ev) })
	}
	return outs, nil
}

// load reads up to n free seats of an event in seat-id order.
func (f *FCFS) load(ctx context.Context, tx pgx.Tx, eventID int64, n int) (int64, []int64, error) {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT true FROM events WHERE id = $1`, eventID).Scan(&exists); err != nil {
		return 0, nil, err
	}
	rows, err := tx.Query(ctx, `SELECT id FROM seats WHERE event_id = $1 AND NOT reserved ORDER BY id LIMIT $2`, eventID, n)
	if err != nil {
		return 0, nil, fmt.Errorf("events: free seats: %w", err)
	}
	free, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	return eventID, free, err
}

func (f *FCFS) reject(outcome string, status int, code, format string, args ...any) requests.Outcome {
	f.Outcomes.WithLabelValues(outcome).Inc()
	return requests.Rejected(domain.NewProblem(status, code, format, args...))
}
