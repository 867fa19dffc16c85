package stays

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/requests"
)

// holdOp is one request of a batch: a create, or a confirm or cancel
// (r.Type says which) of a hold.
type holdOp struct {
	i      int // index in the batch
	r      *requests.Request
	create *CreatePayload
	hold   *HoldPayload
}

// holdBatch decides one room type's hold writes of a batch together, the
// way the shop's reserve batch does (shop/reserve.go). Everything its
// requests need is read once:
//
//  1. from Redis, in one round trip: each create's earlier result (a
//     re-application), the user's hold of the range and the hold its
//     clientHoldKey is bound to, the holds the confirms and cancels name,
//     and the live holds of each night the creates ask for (a second round
//     trip only for holds found through a user's index or a key binding);
//  2. from Postgres, in one round trip: the room type and hotel, the room
//     type's active rooms with their stays over the nights of the batch
//     (from which each night's reserved count follows, and the confirms'
//     free rooms), and the stays the confirmed holds already have.
//
// Then each request is decided in memory in seq order, against what the
// ones before it did (a cancel frees a room for the create after it, a
// confirm takes a room from the one after it). The outcome is written in
// a few statements whatever the batch's size: one INSERT of every new stay,
// one Redis round trip of the holds' scripts (fenced by the lease, in
// order) and, once committed, one that removes the confirmed holds.
//
// Only the room type's lease holder changes its holds, so nothing read
// changes under the batch but through it. The counts are exact at the
// batch's time: a hold counts until its expiry, no sweeper involved.
//
// Against deciding each request by itself (3cca34c), three pairs of a
// 3,000-journey hold storm (A/B pairs, docs/benchmarks.md, 2026-11-29): 1,167 / 1,128 /
// 1,132 → 2,242 / 2,124 / 2,316 writes/s; CPU a journey 1.97–2.07 →
// 0.97–1.11 ms, of which Postgres' 0.97–1.03 → 0.32–0.37.
type holdBatch struct {
	w     *Writes
	rt    int64
	now   time.Time
	token int64
	ops   []holdOp

	done  map[string][]byte // create request id → its result, stored by an earlier try
	ids   map[string]string // index and binding keys → hold id
	holds map[string]*Hold  // holds by id: the live ones; nil once gone

	roomType *roomTypeState
	total    int64             // active rooms of the room type
	nights   map[string]*night // the creates' nights: reserved and held rooms
	rooms    []*roomState      // active rooms, clean ones first, with their stays
	stays    map[string]*stay  // hold id → its stay, committed or about to be

	writes  []holdWrite // Redis, in order, before the commit
	inserts []*stay     // new stays, in order
	removed []*Hold     // confirmed holds, removed once committed
	pending []pendingConfirm
}

type night struct{ reserved, held int64 }

// roomTypeState is the room type's row and its hotel's, or nil if the
// room type does not exist.
type roomTypeState struct {
	hotelID           int64
	status, hotelStat string
}

// roomState is an active room of the type and its stays over the batch's
// nights, as [in, out) date strings ("YYYY-MM-DD" sorts as dates do).
type roomState struct {
	id    int64
	stays [][2]string
}

// stay is a confirmed hold's reservation: read (a confirm again), or to be
// inserted by this batch (room set, res filled by the INSERT).
type stay struct {
	res    Reservation
	holdOf *Hold
}

// pendingConfirm is a confirm whose outcome is its hold's stay, known once
// inserted.
type pendingConfirm struct {
	i int
	s *stay
}

func (hb *holdBatch) apply(ctx context.Context, tx pgx.Tx, b *keyed.Batch, outs []requests.Outcome) error {
	if err := hb.readRedis(ctx); err != nil {
		return fmt.Errorf("stays: read holds: %w", err)
	}
	if err := hb.readPostgres(ctx, tx); err != nil {
		return fmt.Errorf("stays: read room type %d: %w", hb.rt, err)
	}
	for _, op := range hb.ops {
		o, err := hb.decide(op)
		if err != nil {
			return err
		}
		outs[op.i] = o
	}
	if err := hb.insertStays(ctx, tx); err != nil {
		return err
	}
	for _, p := range hb.pending {
		outs[p.i] = requests.Succeeded(p.s.res)
	}
	if err := hb.w.Holds.run(ctx, hb.token, hb.writes, hb.rt); err != nil {
		return err
	}
	if len(hb.removed) > 0 {
		removed, token := hb.removed, hb.token
		b.AfterCommit(func(ctx context.Context) {
			// The stays are committed; their holds stop counting now. If this
			// is missed (a crash), each hold lapses at its expiry.
			ws := make([]holdWrite, len(removed))
			for i, h := range removed {
				ws[i] = holdWrite{hold: h}
			}
			_ = hb.w.Holds.run(ctx, token, ws, 0)
		})
	}
	return nil
}

func (hb *holdBatch) decide(op holdOp) (requests.Outcome, error) {
	switch {
	case op.create != nil:
		return hb.decideCreate(op.r, op.create)
	case op.r.Type == TypeHoldConfirm:
		return hb.decideConfirm(op), nil
	default:
		return hb.decideCancel(op.r, op.hold), nil
	}
}

// decideCreate grants a hold, or returns the user's live one of the same
// range with its expiry pushed back, as seed 000 orders the checks.
func (hb *holdBatch) decideCreate(r *requests.Request, p *CreatePayload) (requests.Outcome, error) {
	// Applied before, but its transaction did not commit: same result again.
	if done, ok := hb.done[r.ID.String()]; ok {
		return requests.Succeeded(json.RawMessage(done)), nil
	}
	if waited := hb.now.Sub(r.AcceptedAt); hb.w.LockWait > 0 && waited > hb.w.LockWait {
		return requests.Reject(domain.CodeContention,
			"the room type was too busy to take this hold within %s; try again", hb.w.LockWait), nil
	}
	if o := hb.roomType.refusal(hb.rt); o != nil {
		return *o, nil
	}
	h, o := hb.existingHold(r, p)
	if o != nil {
		return *o, nil
	}
	if h != nil {
		// One active hold per user and range: return it with its TTL extended.
		h.Reused, h.ClientHoldKey = true, p.ClientHoldKey
	} else {
		dates, o := hb.capacity(p.CheckIn, p.CheckOut)
		if o != nil {
			return *o, nil
		}
		for _, d := range dates {
			hb.nights[d].held++
		}
		h = &Hold{HoldID: NewHoldID(hb.rt), RoomTypeID: hb.rt, CheckIn: p.CheckIn, CheckOut: p.CheckOut,
			UserID: r.UserID, ClientHoldKey: p.ClientHoldKey, CreatedAt: hb.now.UTC()}
	}
	h.ExpiresAt = hb.now.Add(hb.w.TTL).UTC()
	result, err := json.Marshal(h)
	if err != nil {
		return requests.Outcome{}, err
	}
	hb.holds[h.HoldID] = h
	hb.ids[idxKey(hb.rt, h.UserID, h.CheckIn, h.CheckOut)] = h.HoldID
	hb.ids[snapKey(hb.rt, h.ClientHoldKey, h.CheckIn, h.CheckOut)] = h.HoldID
	hb.writes = append(hb.writes, holdWrite{hold: h, put: true, request: r.ID.String(), result: result, ttl: hb.w.TTL, now: hb.now})
	return requests.Succeeded(json.RawMessage(result)), nil
}

// existingHold is the user's live hold of this range, if any, as a copy to
// change (a create again returns it). A clientHoldKey bound to another live
// hold is refused.
func (hb *holdBatch) existingHold(r *requests.Request, p *CreatePayload) (*Hold, *requests.Outcome) {
	var existing *Hold
	if h := hb.holds[hb.ids[idxKey(hb.rt, r.UserID, p.CheckIn, p.CheckOut)]]; h != nil {
		c := *h
		existing = &c
	}
	bound := hb.ids[snapKey(hb.rt, p.ClientHoldKey, p.CheckIn, p.CheckOut)]
	if bound != "" && (existing == nil || bound != existing.HoldID) && hb.holds[bound] != nil {
		o := requests.Rejected(domain.NewProblem(domain.CodeHoldKeyConflict,
			"clientHoldKey is already bound to another hold").WithMeta("holdId", bound))
		return nil, &o
	}
	return existing, nil
}

// capacity refuses a new hold if any night of the range has no room left:
// active rooms minus confirmed or checked-in stays minus live holds. It
// returns the range's nights for the caller to count the new hold in.
func (hb *holdBatch) capacity(checkIn, checkOut string) ([]string, *requests.Outcome) {
	dates, err := nightsOf(checkIn, checkOut)
	if err != nil {
		p, _ := errors.AsType[*domain.Problem](err) // ParseDateRange's errors are all Problems
		o := requests.Rejected(p)
		return nil, &o
	}
	for _, day := range dates {
		n := hb.nights[day]
		if domain.AvailableRooms(hb.total, n.reserved, n.held) < 1 {
			o := requests.Rejected(domain.NewProblem(domain.CodeNotAvailable,
				"no room of this type is left on %s", day).WithMeta("date", day))
			return nil, &o
		}
	}
	return dates, nil
}

// decideConfirm makes a live hold a stay in a room free on each of its
// nights, clean rooms first; confirming again answers with the same stay.
func (hb *holdBatch) decideConfirm(op holdOp) requests.Outcome {
	r, p := op.r, op.hold
	if s := hb.stays[p.HoldID]; s != nil {
		if s.res.UserID != r.UserID && !p.Staff {
			return requests.Reject(domain.CodeForbidden, "this hold belongs to another user")
		}
		if s.holdOf != nil { // inserted by this batch: known once it is
			hb.pending = append(hb.pending, pendingConfirm{op.i, s})
			return requests.Outcome{}
		}
		return requests.Succeeded(s.res)
	}
	h := hb.holds[p.HoldID]
	if h == nil {
		return requests.Reject(domain.CodeHoldExpired, "the hold has expired or does not exist")
	}
	if h.UserID != r.UserID && !p.Staff {
		return requests.Reject(domain.CodeForbidden, "this hold belongs to another user")
	}
	if o := hb.roomType.refusal(hb.rt); o != nil {
		return *o
	}
	room := hb.freeRoom(h.CheckIn, h.CheckOut)
	if room == nil {
		return requests.Reject(domain.CodeNotAvailable, "no room of this type is free for the whole stay")
	}
	room.stays = append(room.stays, [2]string{h.CheckIn, h.CheckOut})
	s := &stay{holdOf: h, res: Reservation{RoomID: room.id, UserID: h.UserID}}
	hb.stays[h.HoldID] = s
	hb.inserts = append(hb.inserts, s)
	hb.pending = append(hb.pending, pendingConfirm{op.i, s})
	hb.release(h, 1)
	hb.removed = append(hb.removed, h)
	return requests.Outcome{}
}

// decideCancel releases a live hold; one no longer live has nothing to
// release, so cancelling twice succeeds twice.
func (hb *holdBatch) decideCancel(r *requests.Request, p *HoldPayload) requests.Outcome {
	result := map[string]any{"holdId": p.HoldID, "cancelled": true}
	h := hb.holds[p.HoldID]
	if h == nil {
		return requests.Succeeded(result)
	}
	if h.UserID != r.UserID && !p.Staff {
		return requests.Reject(domain.CodeForbidden, "this hold belongs to another user")
	}
	hb.release(h, 0)
	hb.writes = append(hb.writes, holdWrite{hold: h})
	return requests.Succeeded(result)
}

// release takes h out of the live holds: each of its nights counted here
// holds one room fewer, and reserved more rooms by stays (1 for a confirm).
func (hb *holdBatch) release(h *Hold, stays int64) {
	hb.holds[h.HoldID] = nil
	dates, _ := nightsOf(h.CheckIn, h.CheckOut)
	for _, d := range dates {
		if n := hb.nights[d]; n != nil {
			n.held--
			n.reserved += stays
		}
	}
}

// freeRoom is the first room, in preference order, with no stay on any
// night of [in, out).
func (hb *holdBatch) freeRoom(in, out string) *roomState {
	for _, room := range hb.rooms {
		if !slices.ContainsFunc(room.stays, func(s [2]string) bool { return s[0] < out && in < s[1] }) {
			return room
		}
	}
	return nil
}

// refusal is a create's or confirm's answer when the room type does not
// take bookings, or nil when it does.
func (s *roomTypeState) refusal(rt int64) *requests.Outcome {
	var o requests.Outcome
	switch {
	case s == nil:
		o = requests.Reject(domain.CodeNotFound, "room type %d does not exist", rt)
	case s.hotelStat != domain.StatusActive:
		o = requests.Reject(domain.CodeHotelInactive, "hotel %d is inactive", s.hotelID)
	case s.status != domain.StatusActive:
		o = requests.Reject(domain.CodeRoomTypeInactive, "room type %d is inactive", rt)
	default:
		return nil
	}
	return &o
}

// nightsOf is the nights of [checkIn, checkOut) as "YYYY-MM-DD".
func nightsOf(checkIn, checkOut string) ([]string, error) {
	dr, err := domain.ParseDateRange(checkIn, checkOut)
	if err != nil {
		return nil, err
	}
	dates := make([]string, 0, dr.Nights())
	for _, d := range dr.Dates() {
		dates = append(dates, d.Format(domain.DateLayout))
	}
	return dates, nil
}

// readRedis reads what the batch's requests find in Redis (see holdBatch).
func (hb *holdBatch) readRedis(ctx context.Context) error {
	rt := hb.rt
	hb.done, hb.ids, hb.holds = map[string][]byte{}, map[string]string{}, map[string]*Hold{}
	pipe := hb.w.Holds.rdb.Pipeline()
	done, ids := map[string]*redis.StringCmd{}, map[string]*redis.StringCmd{}
	var holdIDs []string
	nights := map[string]*redis.IntCmd{}
	since := "(" + strconv.FormatInt(hb.now.UnixMilli(), 10)
	for _, op := range hb.ops {
		if p := op.create; p != nil {
			done[op.r.ID.String()] = pipe.Get(ctx, doneKey(rt, op.r.ID.String()))
			for _, k := range []string{idxKey(rt, op.r.UserID, p.CheckIn, p.CheckOut), snapKey(rt, p.ClientHoldKey, p.CheckIn, p.CheckOut)} {
				if ids[k] == nil {
					ids[k] = pipe.Get(ctx, k)
				}
			}
			dates, _ := nightsOf(p.CheckIn, p.CheckOut) // a range that does not parse is refused as the create is decided
			for _, d := range dates {
				if nights[d] == nil {
					nights[d] = pipe.ZCount(ctx, heldKey(rt, d), since, "+inf")
				}
			}
		} else {
			holdIDs = append(holdIDs, op.hold.HoldID)
		}
	}
	gets := hb.queueHolds(ctx, pipe, holdIDs)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for id, c := range done {
		if b, err := c.Bytes(); err == nil {
			hb.done[id] = b
		}
	}
	holdIDs = holdIDs[:0]
	for k, c := range ids {
		if id := c.Val(); id != "" {
			hb.ids[k] = id
			holdIDs = append(holdIDs, id)
		}
	}
	hb.nights = make(map[string]*night, len(nights))
	for d, c := range nights {
		hb.nights[d] = &night{held: c.Val()}
	}
	if err := hb.keepHolds(gets); err != nil {
		return err
	}
	// The holds found through an index or a binding, not read yet.
	pipe = hb.w.Holds.rdb.Pipeline()
	if gets = hb.queueHolds(ctx, pipe, holdIDs); len(gets) == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	return hb.keepHolds(gets)
}

// queueHolds queues a read of each hold of ids not read yet.
func (hb *holdBatch) queueHolds(ctx context.Context, pipe redis.Pipeliner, ids []string) map[string]*redis.StringCmd {
	gets := map[string]*redis.StringCmd{}
	for _, id := range ids {
		if _, read := hb.holds[id]; !read && gets[id] == nil {
			gets[id] = pipe.Get(ctx, holdKey(hb.rt, id))
		}
	}
	return gets
}

// keepHolds records the holds read: the live ones, and nil for the rest.
func (hb *holdBatch) keepHolds(gets map[string]*redis.StringCmd) error {
	for id, c := range gets {
		hb.holds[id] = nil
		b, err := c.Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return err
		}
		var h Hold
		if err := json.Unmarshal(b, &h); err != nil {
			return err
		}
		if h.ExpiresAt.After(hb.now) {
			hb.holds[id] = &h
		}
	}
	return nil
}

// The batch's reads of rooms and stays, one statement each: a join of the
// two lets the planner probe the stays once a room, which cost 1.3 ms a
// batch in the hold storm against 0.6 for both statements.
const (
	// activeRoomsSQL is room type $1's active rooms, clean ones first.
	activeRoomsSQL = `SELECT id FROM rooms WHERE room_type_id = $1 AND status = 'Active'
		ORDER BY housekeeping_status = 'Dirty', id`
	// typeStaysSQL is the confirmed or checked-in stays of room type $1 over
	// [$2, $3). A stay is only ever made in a room of its room type (a
	// confirm makes it), so these are all the stays of the type's rooms.
	typeStaysSQL = `SELECT room_id, to_char(check_in, 'YYYY-MM-DD'), to_char(check_out, 'YYYY-MM-DD')
		FROM stay_reservations WHERE room_type_id = $1 AND status IN ('Confirmed', 'CheckedIn')
			AND stay && daterange($2::date, $3::date)`
)

// readPostgres reads the room type, its rooms and stays over the batch's
// nights, and the stays of the holds the confirms name (see holdBatch).
func (hb *holdBatch) readPostgres(ctx context.Context, tx pgx.Tx) error {
	from, to, confirmed := hb.window()
	var q pgx.Batch
	q.Queue(`SELECT t.hotel_id, t.status, h.status FROM room_types t JOIN hotels h ON h.id = t.hotel_id WHERE t.id = $1`, hb.rt).
		QueryRow(func(row pgx.Row) error {
			var s roomTypeState
			err := row.Scan(&s.hotelID, &s.status, &s.hotelStat)
			if err == nil {
				hb.roomType = &s
			}
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return err
		})
	if from != "" {
		q.Queue(activeRoomsSQL, hb.rt).Query(func(rows pgx.Rows) error {
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			for _, id := range ids {
				hb.rooms = append(hb.rooms, &roomState{id: id})
			}
			hb.total = int64(len(ids))
			return err
		})
		q.Queue(typeStaysSQL, hb.rt, from, to).Query(hb.scanStays)
	}
	hb.stays = map[string]*stay{}
	if len(confirmed) > 0 {
		q.Queue(`SELECT `+reservationColumns+` FROM stay_reservations WHERE hold_id = ANY($1)`, confirmed).
			Query(func(rows pgx.Rows) error {
				for rows.Next() {
					res, err := scanReservation(rows)
					if err != nil {
						return err
					}
					hb.stays[*res.HoldID] = &stay{res: res}
				}
				return rows.Err()
			})
	}
	return tx.SendBatch(ctx, &q).Close()
}

// window is the nights the batch reads stays over, [from, to): those of
// its creates and of the holds its confirms name ("" when none), and the
// holds the confirms name.
func (hb *holdBatch) window() (from, to string, confirmed []string) {
	widen := func(in, out string) {
		if from == "" || in < from {
			from = in
		}
		if out > to {
			to = out
		}
	}
	for _, op := range hb.ops {
		switch {
		case op.create != nil:
			if _, err := nightsOf(op.create.CheckIn, op.create.CheckOut); err == nil {
				widen(op.create.CheckIn, op.create.CheckOut)
			}
		case op.r.Type == TypeHoldConfirm:
			confirmed = append(confirmed, op.hold.HoldID)
			if h := hb.holds[op.hold.HoldID]; h != nil {
				widen(h.CheckIn, h.CheckOut)
			}
		}
	}
	return from, to, confirmed
}

// scanStays adds the stays to their rooms, and counts each night's stays
// in the type's active rooms (those a stay in an inactive room leaves out).
func (hb *holdBatch) scanStays(rows pgx.Rows) error {
	rooms := make(map[int64]*roomState, len(hb.rooms))
	for _, r := range hb.rooms {
		rooms[r.id] = r
	}
	for rows.Next() {
		var id int64
		var in, out string
		if err := rows.Scan(&id, &in, &out); err != nil {
			return err
		}
		room := rooms[id]
		if room == nil {
			continue
		}
		room.stays = append(room.stays, [2]string{in, out})
		for d, n := range hb.nights {
			if in <= d && d < out {
				n.reserved++
			}
		}
	}
	return rows.Err()
}

// insertStays inserts the batch's new stays in one statement.
func (hb *holdBatch) insertStays(ctx context.Context, tx pgx.Tx) error {
	if len(hb.inserts) == 0 {
		return nil
	}
	n := len(hb.inserts)
	rooms, users, holds, ins, outs := make([]int64, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, s := range hb.inserts {
		rooms[i], users[i], holds[i], ins[i], outs[i] = s.res.RoomID, s.holdOf.UserID, s.holdOf.HoldID, s.holdOf.CheckIn, s.holdOf.CheckOut
	}
	rows, err := tx.Query(ctx, `INSERT INTO stay_reservations
			(hotel_id, room_type_id, room_id, user_id, hold_id, check_in, check_out, status)
		SELECT $1, $2, r, u, h, i::date, o::date, 'Confirmed'
		FROM unnest($3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[]) AS s(r, u, h, i, o)
		RETURNING `+reservationColumns, hb.roomType.hotelID, hb.rt, rooms, users, holds, ins, outs)
	if err != nil {
		return fmt.Errorf("stays: insert stays: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		res, err := scanReservation(rows)
		if err != nil {
			return err
		}
		hb.stays[*res.HoldID].res = res
	}
	return rows.Err()
}
