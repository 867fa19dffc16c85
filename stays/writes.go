package stays

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/requests"
)

// Task types and queue of stays writes.
const (
	Queue           = "stays"
	TypeHoldCreate  = "hold.create"
	TypeHoldConfirm = "hold.confirm"
	TypeHoldCancel  = "hold.cancel"
)

// CreatePayload is a hold.create request.
type CreatePayload struct {
	RoomTypeID    int64  `json:"roomTypeId"`
	CheckIn       string `json:"checkIn"`
	CheckOut      string `json:"checkOut"`
	ClientHoldKey string `json:"clientHoldKey"`
}

// HoldPayload is a hold.confirm or hold.cancel request.
type HoldPayload struct {
	HoldID string `json:"holdId"`
	// Staff is set when staff or an admin acts on a user's hold.
	Staff bool `json:"staff,omitempty"`
}

// Writes applies hold writes in the worker.
type Writes struct {
	Holds *HoldStore
	// TTL is how long a hold lives (HOLD_TTL); each repeat extends it.
	TTL time.Duration
	// LockWait is how long a create may wait for its room type before it is
	// refused with CONTENTION (seed 000 T8, HOLD_LOCK_WAIT).
	LockWait time.Duration
}

// Types are the stays write types for the worker.
func (w *Writes) Types() []keyed.Type {
	return []keyed.Type{
		{Name: TypeHoldCreate, Queue: Queue, Applier: keyed.Each(newBatch, w.create)},
		{Name: TypeHoldConfirm, Queue: Queue, Applier: keyed.Each(newBatch, w.confirm)},
		{Name: TypeHoldCancel, Queue: Queue, Applier: keyed.Each(newBatch, w.cancel)},
	}
}

// batch is one keyed batch with what its requests learned so far.
type batch struct {
	*keyed.Batch
	// nights caches each night's counts of the room type: loaded once per
	// batch and updated as holds are granted. Only the lease holder writes
	// holds of the room type, so the cache stays exact for the batch.
	nights map[string]*night
	total  int64 // active rooms of the room type; -1 until loaded
}

type night struct{ reserved, held int64 }

// newBatch begins a batch of one room type's holds: nothing cached yet.
func newBatch(kb *keyed.Batch) *batch {
	return &batch{Batch: kb, nights: make(map[string]*night), total: -1}
}

// refusedOr is what a create or confirm answers when one of its
// checks stopped it: the check's refusal o, or else its error.
func refusedOr(o *requests.Outcome, err error) (requests.Outcome, error) {
	if o != nil {
		return *o, nil
	}
	return requests.Outcome{}, err
}

// sellable checks that a room type and its hotel take bookings.
func sellable(ctx context.Context, tx pgx.Tx, roomTypeID int64) (*requests.Outcome, error) {
	rt, hotel, err := getRoomType(ctx, tx, roomTypeID)
	if errors.Is(err, domain.ErrNotFound) {
		o := requests.Reject(domain.CodeNotFound, "room type %d does not exist", roomTypeID)
		return &o, nil
	}
	if err != nil {
		return nil, err
	}
	switch {
	case hotel.Status != domain.StatusActive:
		o := requests.Reject(domain.CodeHotelInactive, "hotel %d is inactive", hotel.HotelID)
		return &o, nil
	case rt.Status != domain.StatusActive:
		o := requests.Reject(domain.CodeRoomTypeInactive, "room type %d is inactive", roomTypeID)
		return &o, nil
	}
	return nil, nil
}

func (w *Writes) create(ctx context.Context, tx pgx.Tx, b *batch, r *requests.Request, p *CreatePayload) (requests.Outcome, error) {
	rt, now := p.RoomTypeID, b.Now
	// Applied before, but its transaction did not commit: same result again.
	if done, err := w.Holds.rdb.Get(ctx, doneKey(rt, r.ID.String())).Bytes(); err == nil {
		return requests.Succeeded(json.RawMessage(done)), nil
	} else if !errors.Is(err, redis.Nil) {
		return requests.Outcome{}, err
	}
	if waited := now.Sub(r.AcceptedAt); w.LockWait > 0 && waited > w.LockWait {
		return requests.Reject(domain.CodeContention,
			"the room type was too busy to take this hold within %s; try again", w.LockWait), nil
	}
	if o, err := sellable(ctx, tx, rt); o != nil || err != nil {
		return refusedOr(o, err)
	}
	h, o, err := w.existingHold(ctx, r, p, now)
	if o != nil || err != nil {
		return refusedOr(o, err)
	}
	if h != nil {
		// One active hold per user and range: return it with its TTL extended.
		h.Reused, h.ClientHoldKey = true, p.ClientHoldKey
	} else {
		dates, o, err := w.capacity(ctx, tx, b, rt, p.CheckIn, p.CheckOut)
		if o != nil || err != nil {
			return refusedOr(o, err)
		}
		defer func() {
			for _, d := range dates {
				b.nights[d].held++
			}
		}()
		h = &Hold{HoldID: NewHoldID(rt), RoomTypeID: rt, CheckIn: p.CheckIn, CheckOut: p.CheckOut,
			UserID: r.UserID, ClientHoldKey: p.ClientHoldKey, CreatedAt: now.UTC()}
	}
	h.ExpiresAt = now.Add(w.TTL).UTC()
	result, err := json.Marshal(h)
	if err != nil {
		return requests.Outcome{}, err
	}
	if err := w.Holds.put(ctx, b.Fences[SerialKey(rt)], h, r.ID.String(), result, w.TTL, now); err != nil {
		return requests.Outcome{}, err
	}
	return requests.Succeeded(json.RawMessage(result)), nil
}

// existingHold is the user's live hold of this range, if any (a create
// again returns it). A clientHoldKey bound to another live hold is refused.
func (w *Writes) existingHold(ctx context.Context, r *requests.Request, p *CreatePayload, now time.Time) (*Hold, *requests.Outcome, error) {
	rt := p.RoomTypeID
	ids, err := w.Holds.rdb.MGet(ctx, idxKey(rt, r.UserID, p.CheckIn, p.CheckOut),
		snapKey(rt, p.ClientHoldKey, p.CheckIn, p.CheckOut)).Result()
	if err != nil {
		return nil, nil, err
	}
	var existing *Hold
	if id, ok := ids[0].(string); ok {
		if existing, err = w.Holds.get(ctx, rt, id, now); err != nil {
			return nil, nil, err
		}
	}
	if bound, ok := ids[1].(string); ok && (existing == nil || bound != existing.HoldID) {
		other, err := w.Holds.get(ctx, rt, bound, now)
		if err != nil {
			return nil, nil, err
		}
		if other != nil {
			o := requests.Rejected(domain.NewProblem(domain.CodeHoldKeyConflict,
				"clientHoldKey is already bound to another hold").WithMeta("holdId", bound))
			return nil, &o, nil
		}
	}
	return existing, nil, nil
}

// capacity refuses a new hold if any night of the range has no room left:
// active rooms minus confirmed or checked-in stays minus live holds. It
// returns the range's nights for the caller to count the new hold in.
func (w *Writes) capacity(ctx context.Context, tx pgx.Tx, b *batch, rt int64, checkIn, checkOut string) ([]string, *requests.Outcome, error) {
	dr, err := domain.ParseDateRange(checkIn, checkOut)
	if err != nil {
		p, _ := errors.AsType[*domain.Problem](err) // ParseDateRange's errors are all Problems
		o := requests.Rejected(p)
		return nil, &o, nil
	}
	if err := w.loadNights(ctx, tx, b, rt, dr); err != nil {
		return nil, nil, err
	}
	dates := make([]string, 0, dr.Nights())
	for _, d := range dr.Dates() {
		day := d.Format(domain.DateLayout)
		n := b.nights[day]
		if domain.AvailableRooms(b.total, n.reserved, n.held) < 1 {
			o := requests.Rejected(domain.NewProblem(domain.CodeNotAvailable,
				"no room of this type is left on %s", day).WithMeta("date", day))
			return nil, &o, nil
		}
		dates = append(dates, day)
	}
	return dates, nil, nil
}

// loadNights fills the batch's cache with the nights of dr it lacks: one
// query and one Redis pipeline, whatever the number of nights.
func (w *Writes) loadNights(ctx context.Context, tx pgx.Tx, b *batch, rt int64, dr domain.DateRange) error {
	var missing []time.Time
	for _, d := range dr.Dates() {
		if b.nights[d.Format(domain.DateLayout)] == nil {
			missing = append(missing, d)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	held, err := w.Holds.HeldCounts(ctx, []int64{rt}, missing, b.Now)
	if err != nil {
		return err
	}
	from, to := missing[0], missing[len(missing)-1].AddDate(0, 0, 1)
	rows, err := tx.Query(ctx, `WITH active AS (SELECT id FROM rooms WHERE room_type_id = $1 AND status = 'Active')
		SELECT (SELECT count(*) FROM active), to_char(n, 'YYYY-MM-DD'), count(s.id)
		FROM generate_series($2::date, $3::date - 1, '1 day') n
		LEFT JOIN stay_reservations s ON s.room_type_id = $1 AND s.status IN ('Confirmed', 'CheckedIn')
			AND s.stay @> n::date AND s.room_id IN (SELECT id FROM active)
		GROUP BY n`, rt, from, to)
	if err != nil {
		return err
	}
	reserved := make(map[string]int64, len(missing))
	for rows.Next() {
		var day string
		var n int64
		if err := rows.Scan(&b.total, &day, &n); err != nil {
			rows.Close()
			return err
		}
		reserved[day] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for i, d := range missing {
		day := d.Format(domain.DateLayout)
		if b.nights[day] == nil {
			b.nights[day] = &night{reserved: reserved[day], held: held[rt][i]}
		}
	}
	return nil
}

func (w *Writes) confirm(ctx context.Context, tx pgx.Tx, b *batch, r *requests.Request, p *HoldPayload) (requests.Outcome, error) {
	// Confirmed before (a repeat, or a redelivered task): the same reservation.
	res, err := scanReservation(tx.QueryRow(ctx, `SELECT `+reservationColumns+` FROM stay_reservations WHERE hold_id = $1`, p.HoldID))
	if err == nil {
		if res.UserID != r.UserID && !p.Staff {
			return requests.Reject(domain.CodeForbidden, "this hold belongs to another user"), nil
		}
		return requests.Succeeded(res), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return requests.Outcome{}, err
	}
	h, err := w.Holds.Get(ctx, p.HoldID, b.Now)
	if err != nil {
		return requests.Outcome{}, err
	}
	if h == nil {
		return requests.Reject(domain.CodeHoldExpired, "the hold has expired or does not exist"), nil
	}
	if h.UserID != r.UserID && !p.Staff {
		return requests.Reject(domain.CodeForbidden, "this hold belongs to another user"), nil
	}
	if o, err := sellable(ctx, tx, h.RoomTypeID); o != nil || err != nil {
		return refusedOr(o, err)
	}
	// Capacity, re-checked in Postgres: a concrete active room free on every
	// night, clean ones first. The exclusion constraint backs it up.
	var roomID int64
	err = tx.QueryRow(ctx, `SELECT r.id FROM rooms r WHERE r.room_type_id = $1 AND r.status = 'Active'
		AND NOT EXISTS (SELECT 1 FROM stay_reservations s WHERE s.room_id = r.id
			AND s.status IN ('Confirmed', 'CheckedIn') AND s.stay && daterange($2::date, $3::date))
		ORDER BY r.housekeeping_status = 'Dirty', r.id LIMIT 1`, h.RoomTypeID, h.CheckIn, h.CheckOut).Scan(&roomID)
	if errors.Is(err, pgx.ErrNoRows) {
		return requests.Reject(domain.CodeNotAvailable, "no room of this type is free for the whole stay"), nil
	}
	if err != nil {
		return requests.Outcome{}, err
	}
	res, err = scanReservation(tx.QueryRow(ctx, `INSERT INTO stay_reservations
			(hotel_id, room_type_id, room_id, user_id, hold_id, check_in, check_out, status)
		SELECT t.hotel_id, t.id, $2, $3, $4, $5, $6, 'Confirmed' FROM room_types t WHERE t.id = $1
		RETURNING `+reservationColumns, h.RoomTypeID, roomID, h.UserID, h.HoldID, h.CheckIn, h.CheckOut))
	if err != nil {
		return requests.Outcome{}, err
	}
	token := b.Fences[SerialKey(h.RoomTypeID)]
	b.AfterCommit(func(ctx context.Context) {
		// The reservation is committed; the hold stops counting now. If this
		// is missed (a crash), the hold lapses at its expiry.
		_ = w.Holds.remove(ctx, token, h)
	})
	return requests.Succeeded(res), nil
}

func (w *Writes) cancel(ctx context.Context, _ pgx.Tx, b *batch, r *requests.Request, p *HoldPayload) (requests.Outcome, error) {
	result := map[string]any{"holdId": p.HoldID, "cancelled": true}
	h, err := w.Holds.Get(ctx, p.HoldID, b.Now)
	if err != nil {
		return requests.Outcome{}, err
	}
	if h == nil { // already cancelled, confirmed or expired: nothing left to release
		return requests.Succeeded(result), nil
	}
	if h.UserID != r.UserID && !p.Staff {
		return requests.Reject(domain.CodeForbidden, "this hold belongs to another user"), nil
	}
	if err := w.Holds.remove(ctx, b.Fences[SerialKey(h.RoomTypeID)], h); err != nil {
		return requests.Outcome{}, err
	}
	return requests.Succeeded(result), nil
}
