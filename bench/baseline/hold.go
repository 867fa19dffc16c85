package baseline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/domain"
)

// The hold mode is seed 000's locked hold flow built the way a hotel would
// build it without a queue: one Postgres transaction per HTTP request,
// answered with its outcome. The seed takes a Redisson MultiLock on the
// room type and the stay's nights and then counts reserved + held; the
// strongest plain form of that lock is Postgres's own, on the seed's
// RoomTypeStock rows:
//
//   - create: BEGIN; the room type's stock rows for the stay's nights locked
//     in date order (SELECT … FOR UPDATE), so that two holds sharing a
//     night never decide at once and never deadlock; then, in a statement
//     of its own (its snapshot sees every hold committed by the transactions
//     it waited for) and at one instant, the caller's live hold on the same
//     range, the hold the clientHoldKey is bound to, and each night's live
//     holds, counted until their expires_at (SPEC §4.2's exact counts: an
//     expired hold stops counting at once, no sweeper); a key bound to
//     another live hold is HOLD_KEY_CONFLICT, the caller's live hold on the
//     range is returned with its TTL extended (reused), a night with rooms −
//     reserved − held < 1 is NOT_AVAILABLE; else the hold and its key
//     binding in one statement; COMMIT. Five round trips for a hold, four
//     for a refusal;
//   - confirm: the hold read to learn its nights; the same rows locked in
//     the same order; the hold read again and locked (expired → HOLD_EXPIRED,
//     another user's → FORBIDDEN, confirmed already → the same stay); then in
//     one statement a room of the type free on every night (the exclusion
//     constraint backs it up), the stay, the nights' reserved counts and the
//     hold's status; COMMIT;
//   - cancel: one conditional UPDATE; a hold no longer live has nothing to
//     release, so cancelling twice succeeds twice.
//
// Stock rows are created the first time a night of a room type is asked
// for, outside any hold's transaction, so that a hold only ever locks rows
// that exist, in date order. The caller is X-User-Id, as in the other
// modes; answers and error codes are holdfast's (its outcomes' results,
// answered 201 for a new hold and 200 otherwise). The hotel is made by
// NewHotel, and Nights reads what the holds came to.

const (
	// HoldsPath creates a hold (POST {roomTypeId, checkIn, checkOut,
	// clientHoldKey}); HoldsPath+"/{holdId}/confirm" confirms it (POST) and
	// HoldsPath+"/{holdId}" cancels it (DELETE): holdfast's paths.
	HoldsPath = "/api/v1/holds"
	// DefaultHoldTTL is how long a hold lives: holdfast's HOLD_TTL default.
	DefaultHoldTTL = 10 * time.Minute
)

// HoldRequest is a create's body.
type HoldRequest struct {
	RoomTypeID    int64  `json:"roomTypeId"`
	CheckIn       string `json:"checkIn"`
	CheckOut      string `json:"checkOut"`
	ClientHoldKey string `json:"clientHoldKey"`
}

// Hold is a hold, in holdfast's result shape.
type Hold struct {
	HoldID        string    `json:"holdId"`
	RoomTypeID    int64     `json:"roomTypeId"`
	CheckIn       string    `json:"checkIn"`
	CheckOut      string    `json:"checkOut"`
	UserID        string    `json:"userId"`
	ClientHoldKey string    `json:"clientHoldKey"`
	CreatedAt     time.Time `json:"createdAt"`
	ExpiresAt     time.Time `json:"expiresAt"`
	Reused        bool      `json:"reused"`
}

// Stay is a confirmed hold, in holdfast's reservation shape.
type Stay struct {
	ReservationID int64     `json:"reservationId"`
	HotelID       int64     `json:"hotelId"`
	RoomTypeID    int64     `json:"roomTypeId"`
	RoomID        int64     `json:"roomId"`
	UserID        string    `json:"userId"`
	HoldID        string    `json:"holdId"`
	CheckIn       string    `json:"checkIn"`
	CheckOut      string    `json:"checkOut"`
	Status        string    `json:"status"`
	CreatedAt     time.Time `json:"createdAt"`
}

// holdQueries are the hold mode's statements, schema spelled out.
type holdQueries struct {
	ensureNights string // the stock rows of a range, created if missing
	lockNights   string // a range's stock rows, locked in date order, and the type's rooms
	state        string // at one instant: the caller's live hold, the key's, each night's live holds
	putHold      string // a new hold, or a reused one's later expiry, and its key binding
	readHold     string // a hold and its stay, if confirmed
	lockHold     string // the same, the hold row locked
	book         string // a free room, the stay, the nights' reserved counts, the hold confirmed
	cancel       string // a live hold of the caller cancelled
	liveOwner    string // the owner of a live hold
}

// newHoldQueries builds the statements; locked false leaves the stock rows
// unlocked, for the test that shows what the lock prevents.
func newHoldQueries(schema string, locked bool) holdQueries {
	q := func(table string) string { return pgx.Identifier{schema, table}.Sanitize() }
	types, rooms, stock := q("room_types"), q("rooms"), q("room_type_stock")
	holds, keys, stays := q("holds"), q("hold_keys"), q("stays")
	forUpdate := ""
	if locked {
		forUpdate = " FOR UPDATE OF s"
	}
	live := `h.status = 'HELD' AND h.expires_at > `
	stayCols := `s.id, s.hotel_id, s.room_type_id, s.room_id, s.user_id, s.hold_id,
		to_char(s.check_in, 'YYYY-MM-DD'), to_char(s.check_out, 'YYYY-MM-DD'), s.status, s.created_at`
	readHold := `SELECT h.room_type_id, to_char(h.check_in, 'YYYY-MM-DD'), to_char(h.check_out, 'YYYY-MM-DD'), h.user_id,
			h.status = 'HELD' AND h.expires_at > statement_timestamp(), s.id IS NOT NULL,
			coalesce(s.id, 0), coalesce(s.hotel_id, 0), coalesce(s.room_type_id, 0), coalesce(s.room_id, 0),
			coalesce(s.user_id, ''), coalesce(s.hold_id, ''), coalesce(to_char(s.check_in, 'YYYY-MM-DD'), ''),
			coalesce(to_char(s.check_out, 'YYYY-MM-DD'), ''), coalesce(s.status, ''), coalesce(s.created_at, 'epoch')
		FROM ` + holds + ` h LEFT JOIN ` + stays + ` s ON s.hold_id = h.id WHERE h.id = $1`
	return holdQueries{
		ensureNights: `INSERT INTO ` + stock + ` (room_type_id, stay_date)
			SELECT t.id, d FROM ` + types + ` t, generate_series($2::date, $3::date - 1, '1 day') d WHERE t.id = $1
			ON CONFLICT DO NOTHING`,
		lockNights: `SELECT s.reserved, (SELECT count(*) FROM ` + rooms + ` r WHERE r.room_type_id = $1)
			FROM ` + stock + ` s WHERE s.room_type_id = $1 AND s.stay_date >= $2 AND s.stay_date < $3
			ORDER BY s.stay_date` + forUpdate,
		state: `SELECT statement_timestamp(),
				(SELECT h.id FROM ` + holds + ` h WHERE h.user_id = $2 AND h.room_type_id = $1 AND h.check_in = $3
					AND h.check_out = $4 AND ` + live + `statement_timestamp()),
				(SELECT k.hold_id FROM ` + keys + ` k JOIN ` + holds + ` h ON h.id = k.hold_id WHERE k.room_type_id = $1
					AND k.client_hold_key = $5 AND k.check_in = $3 AND k.check_out = $4 AND ` + live + `statement_timestamp()),
				ARRAY(SELECT (SELECT count(*) FROM ` + holds + ` h WHERE h.room_type_id = $1 AND ` + live + `statement_timestamp()
					AND h.stay @> d::date) FROM generate_series($3::date, $4::date - 1, '1 day') d ORDER BY d)`,
		putHold: `WITH h AS (
				INSERT INTO ` + holds + ` (id, room_type_id, user_id, client_hold_key, check_in, check_out, status, created_at, expires_at)
				VALUES ($1, $2, $3, $4, $5, $6, 'HELD', $7, $8)
				ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at
				RETURNING id, created_at, expires_at),
			k AS (
				INSERT INTO ` + keys + ` (room_type_id, client_hold_key, check_in, check_out, hold_id)
				SELECT $2, $4, $5, $6, id FROM h
				ON CONFLICT (room_type_id, client_hold_key, check_in, check_out) DO UPDATE SET hold_id = EXCLUDED.hold_id)
			SELECT created_at, expires_at FROM h`,
		readHold: readHold,
		lockHold: readHold + ` FOR UPDATE OF h`,
		book: `WITH room AS (
				SELECT r.id FROM ` + rooms + ` r WHERE r.room_type_id = $1 AND NOT EXISTS (SELECT 1 FROM ` + stays + ` o
					WHERE o.room_id = r.id AND o.stay && daterange($2::date, $3::date)) ORDER BY r.id LIMIT 1),
			s AS (
				INSERT INTO ` + stays + ` (hotel_id, room_type_id, room_id, user_id, hold_id, check_in, check_out, status)
				SELECT t.hotel_id, t.id, room.id, $4, $5, $2, $3, 'Confirmed' FROM room, ` + types + ` t WHERE t.id = $1
				RETURNING *),
			n AS (
				UPDATE ` + stock + ` SET reserved = reserved + 1
				WHERE room_type_id = $1 AND stay_date >= $2 AND stay_date < $3 AND EXISTS (SELECT 1 FROM s)),
			h AS (
				UPDATE ` + holds + ` SET status = 'CONFIRMED' WHERE id = $5 AND EXISTS (SELECT 1 FROM s))
			SELECT ` + stayCols + ` FROM s`,
		cancel: `UPDATE ` + holds + ` h SET status = 'CANCELLED'
			WHERE h.id = $1 AND h.user_id = $2 AND ` + live + `statement_timestamp() RETURNING h.id`,
		liveOwner: `SELECT h.user_id FROM ` + holds + ` h WHERE h.id = $1 AND ` + live + `statement_timestamp()`,
	}
}

func (s *Server) createHold(c *fiber.Ctx) error {
	user, err := caller(c)
	var req HoldRequest
	var dr domain.DateRange
	switch {
	case err != nil:
	case json.Unmarshal(c.Body(), &req) != nil || req.RoomTypeID <= 0:
		err = domain.Invalid(`body must be {"roomTypeId": 1, "checkIn": "YYYY-MM-DD", "checkOut": "YYYY-MM-DD", "clientHoldKey": "<uuid>"}`)
	default:
		dr, err = readStay(req)
	}
	if err != nil {
		return answer(c, 0, nil, err)
	}
	h, err := s.hold(c.UserContext(), user, req, dr.Nights())
	status := http.StatusCreated
	if h.Reused {
		status = http.StatusOK
	}
	return answer(c, status, h, err)
}

// readStay is a hold's dates, refused when they are not a valid stay
// starting from yesterday on, or its key is not a UUID.
func readStay(req HoldRequest) (domain.DateRange, error) {
	dr, err := domain.ParseDateRange(req.CheckIn, req.CheckOut)
	switch {
	case err != nil:
	case dr.From.Before(time.Now().UTC().AddDate(0, 0, -1).Truncate(24 * time.Hour)):
		err = domain.NewProblem(domain.CodeInvalidDateRange, "checkIn is in the past")
	case len(req.ClientHoldKey) != 36 || uuid.Validate(req.ClientHoldKey) != nil:
		err = domain.Invalid("clientHoldKey must be a UUID")
	}
	return dr, err
}

// hold runs the create's transaction; the first time a night of the room
// type is asked for, its stock row is created first, outside it.
func (s *Server) hold(ctx context.Context, user string, req HoldRequest, nights int) (Hold, error) {
	for attempt := 0; ; attempt++ {
		h, missing, err := s.tryHold(ctx, user, req, nights)
		if !missing {
			return h, err
		}
		if attempt > 0 {
			return Hold{}, domain.NewProblem(domain.CodeNotFound, "room type %d does not exist", req.RoomTypeID)
		}
		if _, err := s.pool.Exec(ctx, s.holds.ensureNights, req.RoomTypeID, req.CheckIn, req.CheckOut); err != nil {
			return Hold{}, fmt.Errorf("baseline: create stock rows: %w", err)
		}
	}
}

// tryHold is the create's transaction. missing reports stock rows that do
// not exist yet; nothing is done then.
func (s *Server) tryHold(ctx context.Context, user string, req HoldRequest, nights int) (h Hold, missing bool, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Hold{}, false, fmt.Errorf("baseline: begin hold: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	reserved, rooms, err := s.lockNights(ctx, tx, req.RoomTypeID, req.CheckIn, req.CheckOut)
	if err != nil || len(reserved) < nights {
		return Hold{}, err == nil, err
	}
	var now time.Time
	var mine, bound *string
	var held []int64
	if err := tx.QueryRow(ctx, s.holds.state, req.RoomTypeID, user, req.CheckIn, req.CheckOut, req.ClientHoldKey).
		Scan(&now, &mine, &bound, &held); err != nil {
		return Hold{}, false, fmt.Errorf("baseline: read holds: %w", err)
	}
	h = Hold{HoldID: uuid.Must(uuid.NewV7()).String(), RoomTypeID: req.RoomTypeID, CheckIn: req.CheckIn, CheckOut: req.CheckOut,
		UserID: user, ClientHoldKey: req.ClientHoldKey}
	switch {
	case bound != nil && (mine == nil || *bound != *mine):
		return Hold{}, false, domain.NewProblem(domain.CodeHoldKeyConflict,
			"clientHoldKey is already bound to another hold").WithMeta("holdId", *bound)
	case mine != nil: // one live hold per user and range: it again, its TTL extended
		h.HoldID, h.Reused = *mine, true
	default:
		if p := fits(req.CheckIn, reserved, held, rooms); p != nil {
			return Hold{}, false, p
		}
	}
	if s.beforeInsert != nil {
		s.beforeInsert(user)
	}
	if err := tx.QueryRow(ctx, s.holds.putHold, h.HoldID, h.RoomTypeID, user, h.ClientHoldKey, h.CheckIn, h.CheckOut,
		now, now.Add(s.opt.HoldTTL)).Scan(&h.CreatedAt, &h.ExpiresAt); err != nil {
		return Hold{}, false, fmt.Errorf("baseline: put hold: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Hold{}, false, fmt.Errorf("baseline: commit hold: %w", err)
	}
	h.CreatedAt, h.ExpiresAt = h.CreatedAt.UTC(), h.ExpiresAt.UTC()
	return h, false, nil
}

// lockNights locks the stock rows of [checkIn, checkOut) of a room type in
// date order and returns each night's reserved count and the type's rooms.
func (s *Server) lockNights(ctx context.Context, tx pgx.Tx, roomType int64, checkIn, checkOut string) ([]int, int, error) {
	rows, err := tx.Query(ctx, s.holds.lockNights, roomType, checkIn, checkOut)
	if err != nil {
		return nil, 0, fmt.Errorf("baseline: lock nights: %w", err)
	}
	var reserved []int
	var r, rooms int
	if _, err := pgx.ForEachRow(rows, []any{&r, &rooms}, func() error {
		reserved = append(reserved, r)
		return nil
	}); err != nil {
		return nil, 0, fmt.Errorf("baseline: lock nights: %w", err)
	}
	return reserved, rooms, nil
}

// fits refuses a new hold if a night of it has no room left: rooms −
// reserved − held < 1 (SPEC §4.1's availability).
func fits(checkIn string, reserved []int, held []int64, rooms int) *domain.Problem {
	from, _ := time.Parse(domain.DateLayout, checkIn)
	for i := range reserved {
		if reserved[i]+int(held[i]) >= rooms {
			day := from.AddDate(0, 0, i).Format(domain.DateLayout)
			return domain.NewProblem(domain.CodeNotAvailable, "no room of this type is left on %s", day).WithMeta("date", day)
		}
	}
	return nil
}

func (s *Server) confirmHold(c *fiber.Ctx) error {
	user, err := caller(c)
	if err != nil {
		return answer(c, 0, nil, err)
	}
	st, err := s.confirm(c.UserContext(), user, strings.Clone(c.Params("holdId")))
	return answer(c, http.StatusOK, st, err)
}

// heldStay is a hold as confirm reads it, with its stay if it has one.
type heldStay struct {
	roomType        int64
	checkIn, out    string
	user            string
	live, confirmed bool
	stay            Stay
}

func (s *Server) readHold(ctx context.Context, tx pgx.Tx, query, holdID string) (*heldStay, error) {
	var h heldStay
	st := &h.stay
	err := tx.QueryRow(ctx, query, holdID).Scan(&h.roomType, &h.checkIn, &h.out, &h.user, &h.live, &h.confirmed,
		&st.ReservationID, &st.HotelID, &st.RoomTypeID, &st.RoomID, &st.UserID, &st.HoldID, &st.CheckIn, &st.CheckOut, &st.Status, &st.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("baseline: read hold: %w", err)
	}
	st.CreatedAt = st.CreatedAt.UTC()
	return &h, nil
}

// confirm is the confirm's transaction.
func (s *Server) confirm(ctx context.Context, user, holdID string) (Stay, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Stay{}, fmt.Errorf("baseline: begin confirm: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	h, err := s.readHold(ctx, tx, s.holds.readHold, holdID)
	if err != nil || h == nil {
		return Stay{}, cmpErr(err, expired())
	}
	if _, _, err := s.lockNights(ctx, tx, h.roomType, h.checkIn, h.out); err != nil {
		return Stay{}, err
	}
	if h, err = s.readHold(ctx, tx, s.holds.lockHold, holdID); err != nil {
		return Stay{}, err
	}
	switch {
	case h.confirmed && h.user != user, !h.confirmed && h.live && h.user != user:
		return Stay{}, domain.NewProblem(domain.CodeForbidden, "this hold belongs to another user")
	case h.confirmed: // confirmed before: the same stay
		return h.stay, nil
	case !h.live:
		return Stay{}, expired()
	}
	var st Stay
	err = tx.QueryRow(ctx, s.holds.book, h.roomType, h.checkIn, h.out, h.user, holdID).Scan(&st.ReservationID, &st.HotelID,
		&st.RoomTypeID, &st.RoomID, &st.UserID, &st.HoldID, &st.CheckIn, &st.CheckOut, &st.Status, &st.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Stay{}, domain.NewProblem(domain.CodeNotAvailable, "no room of this type is free for the whole stay")
	}
	if err != nil {
		return Stay{}, fmt.Errorf("baseline: book: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Stay{}, fmt.Errorf("baseline: commit confirm: %w", err)
	}
	st.CreatedAt = st.CreatedAt.UTC()
	return st, nil
}

func expired() *domain.Problem {
	return domain.NewProblem(domain.CodeHoldExpired, "the hold has expired or does not exist")
}

// cmpErr is err if there is one, else refusal.
func cmpErr(err error, refusal *domain.Problem) error {
	if err != nil {
		return err
	}
	return refusal
}

// cancelHold cancels the caller's live hold. A hold that is not live has
// nothing left to release: cancelled, confirmed or expired, the cancel
// succeeds; only someone else's live hold is FORBIDDEN.
func (s *Server) cancelHold(c *fiber.Ctx) error {
	user, err := caller(c)
	if err != nil {
		return answer(c, 0, nil, err)
	}
	id := strings.Clone(c.Params("holdId"))
	return answer(c, http.StatusOK, fiber.Map{"holdId": id, "cancelled": true}, s.cancel(c.UserContext(), user, id))
}

func (s *Server) cancel(ctx context.Context, user, id string) error {
	tag, err := s.pool.Exec(ctx, s.holds.cancel, id, user)
	if err != nil || tag.RowsAffected() > 0 {
		return wrap("cancel", err)
	}
	var owner string
	switch err := s.pool.QueryRow(ctx, s.holds.liveOwner, id).Scan(&owner); {
	case err == nil && owner != user:
		return domain.NewProblem(domain.CodeForbidden, "this hold belongs to another user")
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	}
	return wrap("cancel", err)
}
