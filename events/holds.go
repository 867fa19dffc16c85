package events

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/requests"
)

// Seat-hold write types (SPEC §6.3). They share the event's key with FCFS
// and the one-seat booking, and are decided together, a batch at a time.
const (
	TypeSeatHold    = "seat.hold"
	TypeHoldConfirm = "seat.hold.confirm"
	TypeHoldRelease = "seat.hold.release"
	holdsFamily     = "seat.holds"
)

// Hold statuses, as stored (upper case) and shown (lower case).
const (
	holdHeld      = "HELD"
	holdConfirmed = "CONFIRMED"
	holdReleased  = "RELEASED"
	holdExpired   = "EXPIRED"
)

// HoldPayload asks for seats: SeatIDs by name, or Quantity best-available
// seats (in Section, or in any section best first), side by side in one
// row unless Apart allows otherwise.
type HoldPayload struct {
	EventID  int64   `json:"eventId"`
	SeatIDs  []int64 `json:"seatIds,omitempty"`
	Section  string  `json:"section,omitempty"`
	Quantity int     `json:"quantity,omitempty"`
	Apart    bool    `json:"apart,omitempty"`
}

// HoldActionPayload confirms (with a payment reference) or releases a hold.
type HoldActionPayload struct {
	EventID          int64  `json:"eventId"`
	HoldID           int64  `json:"holdId"`
	PaymentReference string `json:"paymentReference,omitempty"`
}

// HoldResult is a hold as its owner sees it.
type HoldResult struct {
	HoldID           int64     `json:"holdId"`
	EventID          int64     `json:"eventId"`
	UserID           string    `json:"userId"`
	Status           string    `json:"status"` // held | confirmed | released | expired
	SeatIDs          []int64   `json:"seatIds"`
	ExpiresAt        time.Time `json:"expiresAt"`
	PaymentReference *string   `json:"paymentReference"`
	BookingReference *string   `json:"bookingReference"` // once confirmed
}

// hold is a seat_holds row.
type hold struct {
	id        int64
	user      string
	seats     []int64
	status    string
	expires   time.Time
	payment   *string
	event     int64
	createdAt time.Time
	changed   bool // status or payment set by this batch
}

func (h *hold) result() HoldResult {
	r := HoldResult{HoldID: h.id, EventID: h.event, UserID: h.user, SeatIDs: h.seats, ExpiresAt: h.expires.UTC(),
		PaymentReference: h.payment}
	switch h.status {
	case holdHeld:
		r.Status = "held"
	case holdConfirmed:
		r.Status = "confirmed"
		ref := BookingReference(refOrder, h.id)
		r.BookingReference = &ref
	case holdReleased:
		r.Status = "released"
	default:
		r.Status = "expired"
	}
	return r
}

// Holds applies seat holds, their confirmations and releases in the
// worker. After a batch commits, the remaining-seat copy and the waiting
// room follow (holdsAfter).
type Holds struct {
	Counts *Counts
	Room   *Room
}

// Types are the seat-hold write types.
func (h *Holds) Types() []keyed.Type {
	a := keyed.ApplierFunc(h.apply)
	return []keyed.Type{
		{Name: TypeSeatHold, Queue: Queue, Applier: a, Family: holdsFamily},
		{Name: TypeHoldConfirm, Queue: Queue, Applier: a, Family: holdsFamily},
		{Name: TypeHoldRelease, Queue: Queue, Applier: a, Family: holdsFamily},
	}
}

// holdsRun is one batch's view of an event: its settings, its free seats
// and the holds the batch's requests touch, changed in memory in seq order
// and written once at the end.
type holdsRun struct {
	event           int64
	seed            []byte // the event's shuffle seed: members' pseudonyms in its room
	holdFor         time.Duration
	perUser         int
	free            *freeSeats
	holds           map[int64]*hold // by id
	byUser          map[string][]*hold
	created         []*hold
	taken, released []int64 // seats newly held, and freed (released or expired)
	gone            []*hold // holds that left the expiry set: confirmed, released, expired
	nextID          []int64 // ids reserved for the holds this batch may create
	soldOut         bool    // the event has sold out through holds, now or before
}

// apply decides a batch of one event's hold writes, the event locked.
func (h *Holds) apply(ctx context.Context, tx pgx.Tx, b *keyed.Batch) ([]requests.Outcome, error) {
	ev, writes, outs := holdsEvent(b)
	err := lockEvent(ctx, tx, ev)
	var run *holdsRun
	if err == nil {
		run, err = loadHolds(ctx, tx, b, ev, writes)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		for i := range outs {
			if outs[i].Status == "" {
				outs[i] = requests.Reject(domain.CodeNotFound, "no such event")
			}
		}
		return outs, nil
	}
	if err != nil {
		return nil, err
	}
	admitted := run.decide(b, writes, outs)
	remaining, err := run.write(ctx, tx, b.Now)
	if err != nil {
		return nil, err
	}
	h.after(b, run, remaining, admitted)
	return outs, nil
}

// holdWrite is a seat-hold write's payload, whichever its type: each
// request of a batch is decoded once.
type holdWrite struct {
	HoldPayload
	HoldID           int64  `json:"holdId,omitempty"`
	PaymentReference string `json:"paymentReference,omitempty"`
}

// holdsEvent decodes b's requests and returns their event (one key is one
// event), their payloads and their outcomes, those whose payload cannot
// be read failed already.
func holdsEvent(b *keyed.Batch) (int64, []holdWrite, []requests.Outcome) {
	outs := make([]requests.Outcome, len(b.Requests))
	writes := make([]holdWrite, len(b.Requests))
	var ev int64
	for i, r := range b.Requests {
		if err := json.Unmarshal(r.Payload, &writes[i]); err != nil {
			outs[i] = requests.Failed("undecodable " + r.Type + " payload")
			continue
		}
		ev = writes[i].EventID
	}
	return ev, writes, outs
}

// decide decides b's open requests in seq order and returns the users who
// got seats.
func (run *holdsRun) decide(b *keyed.Batch, writes []holdWrite, outs []requests.Outcome) (admitted []string) {
	for i, r := range b.Requests {
		switch {
		case outs[i].Status != "":
		case r.Type == TypeSeatHold:
			if outs[i] = run.hold(r.UserID, writes[i].HoldPayload, b.Now); outs[i].Status == domain.StatusSucceeded {
				admitted = append(admitted, r.UserID)
			}
		default:
			outs[i] = run.act(r.Type, r.UserID, writes[i])
		}
	}
	return admitted
}

// lockEvent locks event ev's row: batches of holds, which a worker without
// its key's lease might run (the keyed engine's fence stops only its
// commit), and the periodic sweep each decide on the event's seats and
// holds alone (TestHoldRaceOnTheLastSeatsOfARow). pgx.ErrNoRows: no such
// event.
func lockEvent(ctx context.Context, tx pgx.Tx, ev int64) error {
	var one int
	return tx.QueryRow(ctx, `SELECT 1 FROM events WHERE id = $1 FOR UPDATE`, ev).Scan(&one)
}

// loadHolds expires event ev's holds past their time at b.Now, and reads
// its free seats and the holds b's requests name or whose owners it acts
// for. The caller has locked the event (lockEvent).
func loadHolds(ctx context.Context, tx pgx.Tx, b *keyed.Batch, ev int64, writes []holdWrite) (*holdsRun, error) {
	run := &holdsRun{event: ev, holds: map[int64]*hold{}, byUser: map[string][]*hold{}}
	var holdSeconds int
	if err := tx.QueryRow(ctx, `SELECT seat_hold_seconds, max_seats_per_user, shuffle_seed
		FROM events WHERE id = $1`, ev).Scan(&holdSeconds, &run.perUser, &run.seed); err != nil {
		return nil, err
	}
	run.holdFor = time.Duration(holdSeconds) * time.Second
	expired, err := expireHolds(ctx, tx, ev, b.Now)
	if err != nil {
		return nil, err
	}
	for _, x := range expired {
		run.released = append(run.released, x.seats...)
		run.gone = append(run.gone, x)
	}
	var users []string
	var ids, named []int64 // holds acted on; seats asked for by id
	creates, best := 0, false
	for i, r := range b.Requests {
		p := writes[i]
		users = append(users, r.UserID)
		if r.Type == TypeSeatHold {
			creates++
			named = append(named, p.SeatIDs...)
			best = best || len(p.SeatIDs) == 0
		} else {
			ids = append(ids, p.HoldID)
		}
	}
	if err := run.readHolds(ctx, tx, users, ids); err != nil {
		return nil, err
	}
	if creates == 0 {
		run.free = &freeSeats{}
		return run, nil
	}
	if best { // some request wants the best seats: every free seat is read
		named = nil
	}
	if run.free, err = readFreeSeats(ctx, tx, ev, named); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, `SELECT nextval(pg_get_serial_sequence('seat_holds', 'id')) FROM generate_series(1, $1)`, creates)
	if err != nil {
		return nil, err
	}
	run.nextID, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	return run, err
}

// expireHolds marks event ev's holds past their time at now EXPIRED and
// frees their seats, returning them. Whoever changes a hold's status does
// so under the event's row lock, so each expired hold frees its seats once.
func expireHolds(ctx context.Context, tx pgx.Tx, ev int64, now time.Time) ([]*hold, error) {
	rows, err := tx.Query(ctx, `UPDATE seat_holds SET status = 'EXPIRED', updated_at = $2
		WHERE event_id = $1 AND status = 'HELD' AND expires_at <= $2 RETURNING id, seat_ids`, ev, now)
	if err != nil {
		return nil, err
	}
	expired, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*hold, error) {
		x := &hold{event: ev, status: holdExpired}
		return x, r.Scan(&x.id, &x.seats)
	})
	if err != nil || len(expired) == 0 {
		return expired, err
	}
	var seats []int64
	for _, x := range expired {
		seats = append(seats, x.seats...)
	}
	_, err = tx.Exec(ctx, `UPDATE seats SET reserved = false, hold_id = NULL, updated_at = $2 WHERE id = ANY($1)`, seats, now)
	return expired, err
}

// readHolds reads the holds named by ids and the live ones (held or
// confirmed) of users.
func (run *holdsRun) readHolds(ctx context.Context, tx pgx.Tx, users []string, ids []int64) error {
	rows, err := tx.Query(ctx, `SELECT id, user_id, seat_ids, status, expires_at, payment_reference, created_at
		FROM seat_holds WHERE event_id = $1 AND (id = ANY($2) OR user_id = ANY($3) AND status IN ('HELD', 'CONFIRMED'))`,
		run.event, ids, users)
	if err != nil {
		return err
	}
	holds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*hold, error) {
		x := &hold{event: run.event}
		return x, r.Scan(&x.id, &x.user, &x.seats, &x.status, &x.expires, &x.payment, &x.createdAt)
	})
	for _, x := range holds {
		run.holds[x.id] = x
		if x.status == holdHeld || x.status == holdConfirmed {
			run.byUser[x.user] = append(run.byUser[x.user], x)
		}
	}
	return err
}

// hold decides one request for seats.
func (run *holdsRun) hold(user string, p HoldPayload, now time.Time) requests.Outcome {
	have := 0
	for _, x := range run.byUser[user] {
		if x.status == holdHeld || x.status == holdConfirmed {
			have += len(x.seats)
		}
	}
	want := p.Quantity
	if len(p.SeatIDs) > 0 {
		want = len(p.SeatIDs)
	}
	if have+want > run.perUser {
		return requests.Rejected(domain.NewProblem(domain.CodeSeatLimit,
			"at most %d seats per person for this event; you hold %d", run.perUser, have).
			WithMeta("maxSeatsPerUser", run.perUser).WithMeta("held", have))
	}
	var seats []int64
	var problem *domain.Problem
	if len(p.SeatIDs) > 0 {
		seats, problem = run.free.named(p.SeatIDs)
	} else {
		seats, problem = run.free.best(p.Section, p.Quantity, p.Apart)
	}
	if problem != nil {
		return requests.Rejected(problem)
	}
	run.free.take(seats)
	x := &hold{id: run.nextID[0], event: run.event, user: user, seats: seats, status: holdHeld,
		expires: now.Add(run.holdFor), createdAt: now}
	run.nextID = run.nextID[1:]
	run.created = append(run.created, x)
	run.holds[x.id] = x
	run.byUser[user] = append(run.byUser[user], x)
	run.taken = append(run.taken, seats...)
	return requests.Succeeded(x.result())
}

// act confirms or releases a hold of user's.
func (run *holdsRun) act(typ, user string, p holdWrite) requests.Outcome {
	x, ok := run.holds[p.HoldID]
	if !ok || x.user != user {
		return requests.Reject(domain.CodeNotFound, "no hold %d of yours for this event", p.HoldID)
	}
	if typ == TypeHoldConfirm {
		return run.confirm(x, p.PaymentReference)
	}
	switch x.status {
	case holdHeld:
		// Its seats are offered from the next batch on: a later request
		// of this batch that took them would have them freed by this
		// release's write.
		x.status, x.changed = holdReleased, true
		run.released = append(run.released, x.seats...)
		run.gone = append(run.gone, x)
	case holdConfirmed:
		return requests.Reject(domain.CodeInvalidTransition, "hold %d is confirmed: an order is not released here", x.id)
	}
	return requests.Succeeded(x.result()) // released or expired already: nothing is held
}

// confirm makes a held hold an order, once: a second confirmation with the
// same payment reference gets the same answer.
func (run *holdsRun) confirm(x *hold, payment string) requests.Outcome {
	switch {
	case x.status == holdHeld:
		x.status, x.payment, x.changed = holdConfirmed, &payment, true
		run.gone = append(run.gone, x)
	case x.status == holdConfirmed && x.payment != nil && *x.payment == payment:
	case x.status == holdConfirmed:
		return requests.Reject(domain.CodeConflict, "hold %d is confirmed already, with another payment reference", x.id)
	case x.status == holdReleased:
		return requests.Reject(domain.CodeInvalidTransition, "hold %d was released; hold seats again", x.id)
	default:
		return requests.Rejected(domain.NewProblem(domain.CodeHoldExpired,
			"hold %d expired at %s; hold seats again", x.id, x.expires.UTC().Format(time.RFC3339)))
	}
	return requests.Succeeded(x.result())
}

// write stores what the batch decided and returns the seats that remain.
func (run *holdsRun) write(ctx context.Context, tx pgx.Tx, now time.Time) (int64, error) {
	if len(run.created) > 0 {
		ids, users, seats, expires := []int64{}, []string{}, []string{}, []time.Time{}
		var seatIDs, seatHolds []int64
		for _, x := range run.created {
			b, _ := json.Marshal(x.seats)
			ids, users, seats, expires = append(ids, x.id), append(users, x.user), append(seats, string(b)), append(expires, x.expires)
			for _, s := range x.seats {
				seatIDs, seatHolds = append(seatIDs, s), append(seatHolds, x.id)
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO seat_holds (id, event_id, user_id, seat_ids, status, expires_at, created_at, updated_at)
			OVERRIDING SYSTEM VALUE
			SELECT i, $1, u, translate(s, '[]', '{}')::bigint[], 'HELD', x, $6, $6
			FROM unnest($2::bigint[], $3::text[], $4::text[], $5::timestamptz[]) AS h(i, u, s, x)`,
			run.event, ids, users, seats, expires, now); err != nil {
			return 0, err
		}
		if _, err := tx.Exec(ctx, `UPDATE seats SET reserved = true, hold_id = g.h, updated_at = $3
			FROM unnest($1::bigint[], $2::bigint[]) AS g(s, h) WHERE seats.id = g.s`, seatIDs, seatHolds, now); err != nil {
			return 0, err
		}
	}
	var ids []int64
	var statuses, payments []string
	var freed []int64
	for _, x := range run.holds {
		if !x.changed {
			continue
		}
		ids, statuses, payments = append(ids, x.id), append(statuses, x.status), append(payments, deref(x.payment))
		if x.status == holdReleased {
			freed = append(freed, x.seats...)
		}
	}
	if len(ids) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE seat_holds SET status = g.st, payment_reference = nullif(g.p, ''), updated_at = $4
			FROM unnest($1::bigint[], $2::text[], $3::text[]) AS g(i, st, p) WHERE seat_holds.id = g.i`,
			ids, statuses, payments, now); err != nil {
			return 0, err
		}
	}
	if len(freed) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE seats SET reserved = false, hold_id = NULL, updated_at = $2
			WHERE id = ANY($1)`, freed, now); err != nil {
			return 0, err
		}
	}
	remaining, soldOut, err := countSeats(ctx, tx, run.event, len(run.taken)-len(run.released), run.released)
	run.soldOut = soldOut
	return remaining, err
}

// countSeats counts n more seats of event ev as taken (fewer when n < 0),
// lets FCFS look for free seats from the lowest of freed on, and returns
// how many remain and whether the event has sold out through holds (the
// first time none remains after a batch of holds: events.sold_out_at).
func countSeats(ctx context.Context, tx pgx.Tx, ev int64, n int, freed []int64) (remaining int64, soldOut bool, err error) {
	lowest := int64(0)
	if len(freed) > 0 {
		lowest = slices.Min(freed)
	}
	err = tx.QueryRow(ctx, `UPDATE events SET seats_taken = seats_taken + $2,
			fcfs_after = CASE WHEN $3 > 0 THEN least(fcfs_after, $3 - 1) ELSE fcfs_after END,
			sold_out_at = CASE WHEN total_seats - seats_taken - $2 <= 0 THEN coalesce(sold_out_at, now()) ELSE sold_out_at END
		WHERE id = $1 RETURNING total_seats - seats_taken, sold_out_at IS NOT NULL`, ev, n, lowest).Scan(&remaining, &soldOut)
	return remaining, soldOut, err
}

// expireDue expires event ev's holds due at now and counts their seats
// free, for a write of another kind on the event (FCFS, a booking) that
// must see them free as the holds' own batches do. The caller has locked
// the event. It returns the holds expired and the seats then remaining.
func expireDue(ctx context.Context, tx pgx.Tx, ev int64, now time.Time) ([]*hold, int64, error) {
	expired, err := expireHolds(ctx, tx, ev, now)
	if err != nil || len(expired) == 0 {
		return nil, 0, err
	}
	freed := seatsOf(expired)
	remaining, _, err := countSeats(ctx, tx, ev, -len(freed), freed)
	return expired, remaining, err
}

// seatsOf is the seats of holds.
func seatsOf(holds []*hold) []int64 {
	var seats []int64
	for _, x := range holds {
		seats = append(seats, x.seats...)
	}
	return seats
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// after has the remaining-seat copy, the holds' expiry set and the waiting
// room follow the batch once it has committed; users who got seats give
// their entry token back, as the one-seat booking does.
func (h *Holds) after(b *keyed.Batch, run *holdsRun, remaining int64, admitted []string) {
	b.AfterCommit(func(ctx context.Context) {
		if h.Counts != nil {
			_ = h.Counts.SetHolds(ctx, run.event, remaining, run.created, run.gone)
		}
		if h.Room == nil {
			return
		}
		_ = h.Room.SetLeft(ctx, run.event, remaining, run.soldOut)
		if len(admitted) == 0 {
			return
		}
		e := Event{EventID: run.event, seed: run.seed}
		for _, u := range admitted {
			_ = h.Room.Leave(ctx, e, u)
		}
	})
}

// Retention of seat holds: a hold released or expired holds no seat (its
// seats no longer name it) and is kept this long for its owner's list and
// for support, then deleted by the sweep, at most deleteHoldsAtOnce a
// pass. seat_holds is so bounded by the holds and orders of the last day;
// orders are kept, as bookings are.
const (
	holdRetention     = 24 * time.Hour
	deleteHoldsAtOnce = 10_000
)

// Sweep expires, outside any batch, the holds past their time (by
// Postgres' clock) of every event that has any, so that an event no one
// writes to still frees them, counts them and offers them to its line.
// It locks each event's row as a batch does, so the two never decide on
// the same hold; one event's failure leaves the others to the next pass.
// Then it deletes the holds past their retention.
func (h *Holds) Sweep(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `DELETE FROM seat_holds WHERE id IN (SELECT id FROM seat_holds
		WHERE status IN ('RELEASED', 'EXPIRED') AND updated_at < now() - make_interval(secs => $1) LIMIT $2)`,
		holdRetention.Seconds(), deleteHoldsAtOnce)
	if err != nil {
		return err
	}
	rows, err := pool.Query(ctx, `SELECT DISTINCT event_id FROM seat_holds WHERE status = 'HELD' AND expires_at <= now()`)
	if err != nil {
		return err
	}
	evs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	var errs []error
	for _, ev := range evs {
		var expired []*hold
		var remaining int64
		var soldOut bool
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := lockEvent(ctx, tx, ev); err != nil {
				return err
			}
			var now time.Time
			if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
				return err
			}
			var err error
			if expired, err = expireHolds(ctx, tx, ev, now); err != nil {
				return err
			}
			freed := seatsOf(expired)
			remaining, soldOut, err = countSeats(ctx, tx, ev, -len(freed), freed)
			return err
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if h.Counts != nil {
			errs = append(errs, h.Counts.SetHolds(ctx, ev, remaining, nil, expired))
		}
		if h.Room != nil {
			errs = append(errs, h.Room.SetLeft(ctx, ev, remaining, soldOut))
		}
	}
	return errors.Join(errs...)
}
