package events

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/requests"
)

// Task types of the waiting room and seat booking.
const (
	TypeQueueEnter = "queue.enter"
	TypeSeatBook   = "seat.book"
)

// QueuePayload is a queue.enter request.
type QueuePayload struct {
	EventID int64 `json:"eventId"`
}

// BookPayload is a seat.book request.
type BookPayload struct {
	EventID int64 `json:"eventId"`
	SeatID  int64 `json:"seatId"`
}

// BookResult is a booked seat. BookingReference is what its fan quotes
// (reference.go); results stored before it existed lack it.
type BookResult struct {
	ReservationID    int64  `json:"reservationId"`
	EventID          int64  `json:"eventId"`
	SeatID           int64  `json:"seatId"`
	UserID           string `json:"userId"`
	BookingReference string `json:"bookingReference"`
}

// RoomWrites applies queue entries and seat bookings in the worker.
type RoomWrites struct {
	Room   *Room
	Sealer *Sealer
	Counts *Counts // when set, events that lose seats have their copy set after commit
}

// Types are the waiting room's write types.
func (w *RoomWrites) Types() []keyed.Type {
	return []keyed.Type{
		{Name: TypeQueueEnter, Queue: Queue, Applier: keyed.Each(beginEntering, w.enter)},
		{Name: TypeSeatBook, Queue: Queue, Applier: keyed.Each(keyed.Plain, w.book)},
	}
}

// enter puts each user in line. An entry the API accepted before the
// event's salesStartAt joins the pre-queue: its place is 0, so the room
// orders it by pseudonym (the shuffle), and its pseudonym is listed in
// prequeue_entries in entry order; any other entry's place is its request's
// seq, so the line behind the pre-queue is in seq order. So is an
// entry accepted before the start that reaches the room only after the
// pre-queue was sealed (seal.go): the seal cannot have happened while this
// entry was visible and open, and placing it in the draw now would move
// people back. An entry accepted before queueOpensAt is refused.
func (w *RoomWrites) enter(ctx context.Context, tx pgx.Tx, b *entering, r *requests.Request, p *QueuePayload) (requests.Outcome, error) {
	e, err := w.event(ctx, tx, b, p.EventID)
	if err != nil {
		return requests.Outcome{}, err
	}
	if e == nil {
		return requests.Reject(domain.CodeNotFound, "no such event"), nil
	}
	if !e.queueOpen(r.AcceptedAt) {
		return requests.Rejected(queueNotOpen(*e)), nil
	}
	place := r.Seq
	if e.inPrequeue(r.AcceptedAt) && e.sealedAt == nil {
		place = 0
		if _, err := tx.Exec(ctx, `INSERT INTO prequeue_entries (event_id, pseudonym, seq) VALUES ($1, $2, $3)
			ON CONFLICT DO NOTHING`, e.EventID, e.member(r.UserID), r.Seq); err != nil {
			return requests.Outcome{}, err
		}
	}
	st, err := w.Room.enter(ctx, *e, b.Fences[QueueKey(p.EventID)], r.UserID, place)
	if err != nil {
		return requests.Outcome{}, err
	}
	return requests.Succeeded(st), nil
}

// entering is a batch of entries with the events they read (nil: no such
// event).
type entering struct {
	*keyed.Batch
	events map[int64]*Event
}

func beginEntering(b *keyed.Batch) *entering { return &entering{Batch: b, events: map[int64]*Event{}} }

// event reads event id once a batch. The first entries applied after the
// start may be what the pre-queue's seal waits for: once the batch commits,
// the seal is tried.
func (w *RoomWrites) event(ctx context.Context, tx pgx.Tx, b *entering, id int64) (*Event, error) {
	if e, read := b.events[id]; read {
		return e, nil
	}
	ev, err := eventIn(ctx, tx, id)
	if errors.Is(err, domain.ErrNotFound) {
		b.events[id] = nil
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	b.events[id] = &ev
	if ev.SalesStartAt != nil && ev.sealedAt == nil && !b.Now.Before(*ev.SalesStartAt) && w.Sealer != nil {
		now := b.Now
		b.AfterCommit(func(ctx context.Context) { _, _ = w.Sealer.TrySeal(ctx, ev, now) })
	}
	return &ev, nil
}

// queueNotOpen is the answer to an entry before the queue opens.
func queueNotOpen(e Event) *domain.Problem {
	return domain.NewProblem(domain.CodeQueueNotOpen, "the queue opens at %s",
		e.QueueOpensAt.Format(time.RFC3339)).WithMeta("queueOpensAt", e.QueueOpensAt.Format(time.RFC3339Nano))
}

// book reserves chosen seats, in seq order, on one event; success
// gives the caller's entry token back.
func (w *RoomWrites) book(ctx context.Context, tx pgx.Tx, b *keyed.Batch, r *requests.Request, p *BookPayload) (requests.Outcome, error) {
	if err := w.expireDue(ctx, tx, b, p.EventID); err != nil {
		return requests.Outcome{}, err
	}
	var reserved, soldOut bool
	var seed []byte
	err := tx.QueryRow(ctx, `SELECT s.reserved, e.shuffle_seed, e.sold_out_at IS NOT NULL FROM seats s JOIN events e ON e.id = s.event_id
		WHERE s.id = $1 AND s.event_id = $2`, p.SeatID, p.EventID).Scan(&reserved, &seed, &soldOut)
	if errors.Is(err, pgx.ErrNoRows) {
		return requests.Reject(domain.CodeNotFound, "no such seat in this event"), nil
	}
	if err != nil {
		return requests.Outcome{}, err
	}
	var mine int64
	err = tx.QueryRow(ctx, `SELECT seat_id FROM seat_reservations WHERE event_id = $1 AND user_id = $2`, p.EventID, r.UserID).Scan(&mine)
	if err == nil {
		return requests.Rejected(domain.NewProblem(domain.CodeAlreadyReserved,
			"you already hold a seat for this event").WithMeta("seatId", mine)), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return requests.Outcome{}, err
	}
	if reserved {
		var left bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM seats WHERE event_id = $1 AND NOT reserved)`, p.EventID).Scan(&left); err != nil {
			return requests.Outcome{}, err
		}
		if !left {
			return requests.Reject(domain.CodeSoldOut, "no seat is left"), nil
		}
		return requests.Reject(domain.CodeSeatTaken, "this seat is taken"), nil
	}
	if _, err := tx.Exec(ctx, `UPDATE seats SET reserved = true, updated_at = $2 WHERE id = $1`, p.SeatID, b.Now); err != nil {
		return requests.Outcome{}, err
	}
	remaining, err := TakeSeats(ctx, tx, p.EventID, 1)
	if err != nil {
		return requests.Outcome{}, err
	}
	res := BookResult{EventID: p.EventID, SeatID: p.SeatID, UserID: r.UserID}
	if err := tx.QueryRow(ctx, `INSERT INTO seat_reservations (event_id, seat_id, user_id, created_at)
		VALUES ($1, $2, $3, $4) RETURNING id`, p.EventID, p.SeatID, r.UserID, b.Now).Scan(&res.ReservationID); err != nil {
		return requests.Outcome{}, err
	}
	res.BookingReference = BookingReference(refSeat, res.ReservationID)
	ev, user := Event{EventID: p.EventID, seed: seed}, r.UserID
	b.AfterCommit(func(ctx context.Context) {
		if soldOut { // the room offers released seats: one fewer now
			_ = w.Room.SetLeft(ctx, ev.EventID, remaining, true)
		}
		_ = w.Room.Leave(ctx, ev, user)
		if w.Counts != nil {
			_ = w.Counts.Set(ctx, ev.EventID, remaining)
		}
	})
	return requests.Succeeded(res), nil
}

// expireDue expires event ev's seat holds past their time, if it has any,
// so that their seats are free for this booking as for the holds' own
// batches. Only then is the event locked (as the holds' batches and the
// sweep lock it before they touch a hold): a booking of an event without
// holds takes no lock of its own.
func (w *RoomWrites) expireDue(ctx context.Context, tx pgx.Tx, b *keyed.Batch, ev int64) error {
	var due bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM seat_holds
		WHERE event_id = $1 AND status = 'HELD' AND expires_at <= $2)`, ev, b.Now).Scan(&due); err != nil || !due {
		return err
	}
	if err := lockEvent(ctx, tx, ev); err != nil {
		return err
	}
	expired, left, err := expireDue(ctx, tx, ev, b.Now)
	if len(expired) > 0 && w.Counts != nil {
		b.AfterCommit(func(ctx context.Context) { _ = w.Counts.SetHolds(ctx, ev, left, nil, expired) })
	}
	return err
}
