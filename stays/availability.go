package stays

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/api"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/storage"
)

// Reasons a check answers isAvailable false.
const (
	ReasonNoRoomsLeft   = "NO_ROOMS_LEFT"   // every active room is reserved, held or excluded
	ReasonNoActiveRooms = "NO_ACTIVE_ROOMS" // the room type has no room in service
)

// AvailabilityQuery is what the availability endpoints are asked.
type AvailabilityQuery struct {
	HotelID    int64
	RoomTypeID int64 // 0: every active room type of the hotel
	Range      domain.DateRange
	// ExcludeDirty counts Dirty rooms as unavailable (seed 001 §3.4).
	ExcludeDirty bool
}

// AvailabilityItem is one room type on one night.
type AvailabilityItem struct {
	Date             string `json:"date"`
	RoomTypeID       int64  `json:"roomTypeId"`
	RoomTypeName     string `json:"roomTypeName"`
	TotalRooms       int64  `json:"totalRooms"`
	UnavailableRooms int64  `json:"unavailableRooms"`
	HeldRooms        int64  `json:"heldRooms"`
	AvailableRooms   int64  `json:"availableRooms"`
}

// HotelAvailability is the aggregate answer: items by date, then room type.
type HotelAvailability struct {
	HotelID  int64              `json:"hotelId"`
	Currency string             `json:"currency"`
	Items    []AvailabilityItem `json:"items"`
}

// RoomAvailability is one room over the range.
type RoomAvailability struct {
	RoomID             int64    `json:"roomId"`
	Number             string   `json:"number"`
	RoomTypeID         int64    `json:"roomTypeId"`
	Status             string   `json:"status"`
	HousekeepingStatus string   `json:"housekeepingStatus"`
	ReservedDates      []string `json:"reservedDates"`
	AvailableDates     []string `json:"availableDates"`
}

// RoomsAvailability is the per-room answer.
type RoomsAvailability struct {
	HotelID int64              `json:"hotelId"`
	Items   []RoomAvailability `json:"items"`
}

// AvailabilityCheck is the quick yes/no for one room type (seed 001 §4.3).
type AvailabilityCheck struct {
	RoomTypeID     int64  `json:"roomTypeId"`
	From           string `json:"from"`
	To             string `json:"to"`
	AvailableCount int64  `json:"availableCount"`
	IsAvailable    bool   `json:"isAvailable"`
	Reason         string `json:"reason,omitempty"`
}

// Availability computes availability from rooms and stays in Postgres and
// live holds in Redis.
type Availability struct {
	pool  *pgxpool.Pool
	holds *HoldStore
}

// NewAvailability returns an Availability on pool and holds.
func NewAvailability(pool *pgxpool.Pool, holds *HoldStore) *Availability {
	return &Availability{pool: pool, holds: holds}
}

// scopeCTE finds the hotel and the status of the asked room type ($2, 0 for
// none) in it; no row means no such hotel.
const scopeCTE = `h AS (
	SELECT id, currency, status,
		(SELECT t.status FROM room_types t WHERE t.id = $2 AND t.hotel_id = $1) AS type_status
	FROM hotels WHERE id = $1
)`

// aggregateSQL is the whole aggregate in one statement. Per active room type
// (rows ordered by id): its active rooms and how many are Dirty, and the
// change, night by night, in how many of them a stay occupies (all, and the
// Dirty ones). A stay adds one on its first night in range and takes one off
// after its last, at day offsets from $3; the caller sums the changes. So a
// stay costs one row however long it is, grouped twice in one hash pass
// (GROUPING SETS): no series per stay, whose unknown length also misleads
// the planner into JIT-compiling the query. The exclusion constraint
// guarantees a room holds at most one occupying stay per night, so a count
// of stays is a count of rooms. The stays come from the partial gist index
// on (hotel_id, stay).
//
// There are two statements, for a hotel's room types and for one ($2; the
// scope reads its status either way), so that neither filters with
// "$2 = 0 OR": each is prepared once a connection and runs on a plan
// Postgres keeps, not planned afresh each time. Planning the statement
// cost more than running it: a hotel of 10 room types of 20 rooms and no
// stays took 0.44 ms a read with a new plan each time against 0.10 ms
// prepared, and the benchmark's hotel (10 types of 50 rooms, 50,000 stays)
// 3.7–4.2 against 2.6–3.0 ms (psql, EXPLAIN-less EXECUTE, 8 runs each);
// make benchgo's Availability31Nights 4.16 → 3.08 ms; the load tool's
// availability-read (A/B pairs, docs/benchmarks.md, 3 pairs) 1,005–1,057 → 1,488–1,561
// reads/s, Postgres 0.70–0.74 → 0.20–0.21 ms of CPU a read.
var (
	aggregateSQL       = aggregateStatement(false)
	aggregateOfTypeSQL = aggregateStatement(true)
)

// aggregateStatement is the aggregate of every active room type of hotel
// $1, or, ofType, of room type $2 only.
func aggregateStatement(ofType bool) string {
	only := func(column string) string { // the room type filter on column
		if !ofType {
			return ""
		}
		return " AND " + column + " = $2"
	}
	return `WITH ` + scopeCTE + `,
types AS (
	SELECT t.id, t.name FROM room_types t
	WHERE t.hotel_id = $1 AND t.status = 'Active'` + only("t.id") + `
),
totals AS (
	SELECT r.room_type_id, count(*) AS total, count(*) FILTER (WHERE r.housekeeping_status = 'Dirty') AS dirty
	FROM rooms r
	WHERE r.hotel_id = $1 AND r.status = 'Active'` + only("r.room_type_id") + `
	GROUP BY r.room_type_id
),
changes AS (
	SELECT r.room_type_id, GROUPING(x.first) = 1 AS ends, coalesce(x.first, x.after) AS i,
		count(*) AS n, count(*) FILTER (WHERE r.housekeeping_status = 'Dirty') AS n_dirty
	FROM stay_reservations s
	JOIN rooms r ON r.id = s.room_id
	CROSS JOIN LATERAL (SELECT greatest(s.check_in, $3::date) - $3::date AS first,
		least(s.check_out, $4::date) - $3::date AS after) AS x
	WHERE s.hotel_id = $1 AND s.status IN ('Confirmed', 'CheckedIn')
		AND s.stay && daterange($3::date, $4::date)
		AND r.status = 'Active'` + only("r.room_type_id") + `
	GROUP BY GROUPING SETS ((r.room_type_id, x.first), (r.room_type_id, x.after))
),
changes_by_type AS (
	SELECT room_type_id, array_agg(i) AS nights,
		array_agg(CASE WHEN ends THEN -n ELSE n END) AS n,
		array_agg(CASE WHEN ends THEN -n_dirty ELSE n_dirty END) AS n_dirty
	FROM changes GROUP BY room_type_id
)
SELECT h.currency, h.status, h.type_status, t.id, t.name,
	coalesce(c.total, 0), coalesce(c.dirty, 0),
	coalesce(o.nights, '{}'), coalesce(o.n, '{}'), coalesce(o.n_dirty, '{}'),
	(SELECT coalesce(array_agg(s.hold_id), '{}') FROM stay_reservations s WHERE s.hold_id = ANY($5::text[]))
FROM h
LEFT JOIN types t ON true
LEFT JOIN totals c ON c.room_type_id = t.id
LEFT JOIN changes_by_type o ON o.room_type_id = t.id
ORDER BY t.id`
}

// customPlan runs a statement unprepared (one round trip), so Postgres
// plans it for the actual hotel, room type and dates every time. A cached
// generic plan of roomsSQL cannot see that "$2 = 0" drops the room type
// filter, nor how many stays the dates select: it measured over twice as
// slow. Dates go as
// text, since this mode would send a time.Time as timestamptz, which the
// casts to date would read in the session's time zone.
const customPlan = pgx.QueryExecModeExec

// typeNights is one room type's counts per night of the range.
type typeNights struct {
	id                 int64
	name               string
	total              int64
	occupied, excluded []int64 // per night: rooms a stay occupies; Dirty rooms no stay does
}

// scope turns the hotel's and the asked room type's statuses into the
// problem the request meets, if any. Existence comes before state.
func scope(q AvailabilityQuery, hotelStatus string, typeStatus *string) error {
	if q.RoomTypeID != 0 && typeStatus == nil {
		return domain.NewProblem(domain.CodeNotFound, "no room type %d in this hotel", q.RoomTypeID)
	}
	if hotelStatus != domain.StatusActive {
		return domain.NewProblem(domain.CodeHotelInactive, "the hotel is inactive")
	}
	if typeStatus != nil && *typeStatus != domain.StatusActive {
		return domain.NewProblem(domain.CodeRoomTypeInactive, "the room type is inactive").
			WithMeta("roomTypeId", q.RoomTypeID)
	}
	return nil
}

var errNoHotel = domain.NewProblem(domain.CodeNotFound, "no such hotel")

// readTries bounds how often Hotel reads again when a batch on a room type
// changed its holds while it read.
const readTries = 10

// errBusyRoomType is Hotel's answer when every try met a batch.
var errBusyRoomType = domain.NewProblem(domain.CodeUnavailable,
	"the room type's holds changed too often to read; try again").WithMeta("retryAfterSeconds", 1)

// Hotel returns the availability of every active room type of a hotel (or
// of one) on each night of the range.
//
// Holds live in Redis and stays in Postgres. A batch of a room type's hold
// writes writes its holds to Redis (and bumps the room type's batch
// counter, in the same transaction), then commits its stays, then removes
// the confirmed holds. So Hotel reads Redis first (each room type's live
// hold ids and counter, atomically), then Postgres in one statement (the
// stays, and which of those holds already have a stay: they count as
// stays, not holds), then the counters again. If no batch wrote between
// the two counter reads, the answer is the room type's state at one
// instant: every batch's holds before its stays, as a reader between the
// two writes sees them. If one did, the stays read may be a later batch's
// than the holds (a room taken by a confirm and its hold gone, or a
// confirm shown without a hold placed before it), so it reads again, up to
// readTries times, and then answers 503. A try is short: Redis and
// Postgres are each read in one round trip, on a connection taken before
// the first. Staff transitions of stays and edits of rooms bypass the
// batches; the read takes them at its Postgres snapshot.
func (a *Availability) Hotel(ctx context.Context, q AvailabilityQuery, now time.Time) (HotelAvailability, error) {
	const op = "stays: availability"
	conn, err := a.pool.Acquire(ctx)
	if err != nil {
		return HotelAvailability{}, storage.Translate(op, err)
	}
	defer conn.Release()
	types := []int64{q.RoomTypeID}
	if q.RoomTypeID == 0 {
		rows, err := conn.Query(ctx, `SELECT id FROM room_types WHERE hotel_id = $1 AND status = 'Active'`, q.HotelID)
		if err == nil {
			types, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		if err != nil {
			return HotelAvailability{}, storage.Translate(op, err)
		}
	}
	for range readTries {
		out, ok, err := a.hotelOnce(ctx, conn, q, types, now)
		if err != nil || ok {
			return out, err
		}
	}
	return HotelAvailability{}, errBusyRoomType
}

// hotelOnce is one try of Hotel on conn for the room types read before;
// false if a batch or the room types changed while it read.
func (a *Availability) hotelOnce(ctx context.Context, conn *pgxpool.Conn, q AvailabilityQuery, types []int64, now time.Time) (HotelAvailability, bool, error) {
	const op = "stays: availability"
	dates := q.Range.Dates()
	held, err := a.holds.liveHolds(ctx, types, dates, now)
	if err != nil {
		return HotelAvailability{}, false, fmt.Errorf("%s: live holds: %w", op, err)
	}
	sql := aggregateSQL
	if q.RoomTypeID != 0 {
		sql = aggregateOfTypeSQL
	}
	rows, err := conn.Query(ctx, sql, q.HotelID, q.RoomTypeID,
		q.Range.From.Format(domain.DateLayout), q.Range.To.Format(domain.DateLayout), distinctIDs(held))
	if err != nil {
		return HotelAvailability{}, false, storage.Translate(op, err)
	}
	h, err := scanHotel(rows, q)
	if err != nil {
		return HotelAvailability{}, false, err
	}
	if !h.found {
		return HotelAvailability{}, false, errNoHotel
	}
	if err := scope(q, h.status, h.typeStatus); err != nil {
		return HotelAvailability{}, false, err
	}
	after, err := a.holds.versions(ctx, types)
	if err != nil {
		return HotelAvailability{}, false, fmt.Errorf("%s: hold versions: %w", op, err)
	}
	for _, rt := range types {
		if after[rt] != held[rt].version {
			return HotelAvailability{}, false, nil
		}
	}
	for _, t := range h.types {
		if _, ok := held[t.id]; !ok { // a room type made active since the list was read
			return HotelAvailability{}, false, nil
		}
	}
	return h.availability(q, dates, held), true, nil
}

// distinctIDs is each live hold once (a hold has an id on each night).
func distinctIDs(held map[int64]heldNights) []string {
	var ids []string
	seen := map[string]bool{}
	for _, h := range held {
		for _, night := range h.ids {
			for _, id := range night {
				if !seen[id] {
					seen[id] = true
					ids = append(ids, id)
				}
			}
		}
	}
	return ids
}

// availability is the answer: each type's counts on each date, its live
// holds held but for those that have a stay.
func (h hotelRows) availability(q AvailabilityQuery, dates []time.Time, held map[int64]heldNights) HotelAvailability {
	out := HotelAvailability{HotelID: q.HotelID, Currency: h.currency,
		Items: make([]AvailabilityItem, 0, len(dates)*len(h.types))}
	for i, d := range dates {
		date := d.Format(domain.DateLayout)
		for _, t := range h.types {
			it := AvailabilityItem{Date: date, RoomTypeID: t.id, RoomTypeName: t.name, TotalRooms: t.total,
				UnavailableRooms: t.occupied[i] + t.excluded[i]}
			for _, id := range held[t.id].ids[i] {
				if !h.confirmed[id] {
					it.HeldRooms++
				}
			}
			it.AvailableRooms = domain.AvailableRooms(it.TotalRooms, it.UnavailableRooms, it.HeldRooms)
			out.Items = append(out.Items, it)
		}
	}
	return out
}

// hotelRows is what the availability query says of a hotel: its statuses
// and each active room type's counts per night.
type hotelRows struct {
	found            bool // the hotel exists
	currency, status string
	typeStatus       *string // the asked room type's, if it exists
	types            []typeNights
	confirmed        map[string]bool // the ids asked about that have a stay
}

// scanHotel reads the availability query's rows (one per room type, or one
// with no type when the hotel has none active) and turns each type's
// changes per night into counts per night. It closes rows.
func scanHotel(rows pgx.Rows, q AvailabilityQuery) (hotelRows, error) {
	const op = "stays: availability"
	defer rows.Close()
	nights := q.Range.Nights()
	var h hotelRows
	for rows.Next() {
		h.found = true
		var id *int64
		var name *string
		var total, dirty int64
		var offsets []int32
		var changes, dirtyChanges []int64
		var confirmed []string
		if err := rows.Scan(&h.currency, &h.status, &h.typeStatus, &id, &name, &total, &dirty,
			&offsets, &changes, &dirtyChanges, &confirmed); err != nil {
			return hotelRows{}, storage.Translate(op, err)
		}
		if h.confirmed == nil {
			h.confirmed = make(map[string]bool, len(confirmed))
			for _, c := range confirmed {
				h.confirmed[c] = true
			}
		}
		if id == nil { // the hotel has no active room type
			continue
		}
		tn := typeNights{id: *id, name: *name, total: total,
			occupied: make([]int64, nights), excluded: make([]int64, nights)}
		occ, occDirty := make([]int64, nights+1), make([]int64, nights+1)
		for k, i := range offsets {
			if i < 0 || int(i) > nights {
				return hotelRows{}, fmt.Errorf("%s: night offset %d out of range", op, i)
			}
			occ[i] += changes[k] // a night may start some stays and end others
			occDirty[i] += dirtyChanges[k]
		}
		var n, nDirty int64
		for i := range nights {
			n, nDirty = n+occ[i], nDirty+occDirty[i]
			tn.occupied[i] = n
			if q.ExcludeDirty {
				tn.excluded[i] = dirty - nDirty // Dirty and occupied counts once
			}
		}
		h.types = append(h.types, tn)
	}
	return h, storage.Translate(op, rows.Err())
}

// Check answers whether one more stay of q.RoomTypeID fits every night of
// the range: availableCount is the fewest rooms left on any night.
func (a *Availability) Check(ctx context.Context, q AvailabilityQuery, now time.Time) (AvailabilityCheck, error) {
	av, err := a.Hotel(ctx, q, now)
	if err != nil {
		return AvailabilityCheck{}, err
	}
	out := AvailabilityCheck{RoomTypeID: q.RoomTypeID, From: q.Range.From.Format(domain.DateLayout),
		To: q.Range.To.Format(domain.DateLayout)}
	var minTotal int64
	for i, it := range av.Items {
		if i == 0 || it.AvailableRooms < out.AvailableCount {
			out.AvailableCount = it.AvailableRooms
		}
		if i == 0 || it.TotalRooms < minTotal {
			minTotal = it.TotalRooms
		}
	}
	out.IsAvailable = out.AvailableCount > 0
	switch {
	case out.IsAvailable:
	case minTotal == 0:
		out.Reason = ReasonNoActiveRooms
	default:
		out.Reason = ReasonNoRoomsLeft
	}
	return out, nil
}

// roomsSQL lists the rooms of the hotel's active room types with a status
// ($5), optionally of one room type, each with the stays that occupy it in
// range as day offsets from $3: first night, and the night after the last.
const roomsSQL = `WITH ` + scopeCTE + `,
rms AS (
	SELECT r.id, r.number, r.room_type_id, r.status, r.housekeeping_status
	FROM rooms r JOIN room_types t ON t.id = r.room_type_id
	WHERE r.hotel_id = $1 AND t.status = 'Active' AND ($2 = 0 OR r.room_type_id = $2) AND r.status = $5
),
res AS (
	SELECT s.room_id, array_agg(greatest(s.check_in, $3::date) - $3::date) AS firsts,
		array_agg(least(s.check_out, $4::date) - $3::date) AS afters
	FROM stay_reservations s
	JOIN rms ON rms.id = s.room_id
	WHERE s.hotel_id = $1 AND s.status IN ('Confirmed', 'CheckedIn')
		AND s.stay && daterange($3::date, $4::date)
	GROUP BY s.room_id
)
SELECT h.status, h.type_status, rms.id, rms.number, rms.room_type_id, rms.status, rms.housekeeping_status,
	coalesce(res.firsts, '{}'), coalesce(res.afters, '{}')
FROM h
LEFT JOIN rms ON true
LEFT JOIN res ON res.room_id = rms.id
ORDER BY rms.room_type_id, rms.id`

// Rooms returns each room with status over the range: the nights a stay
// occupies it, and the nights it could be sold (none if it is not Active, or
// Dirty when q.ExcludeDirty).
func (a *Availability) Rooms(ctx context.Context, q AvailabilityQuery, status string) (RoomsAvailability, error) {
	const op = "stays: room availability"
	rows, err := a.pool.Query(ctx, roomsSQL, customPlan, q.HotelID, q.RoomTypeID,
		q.Range.From.Format(domain.DateLayout), q.Range.To.Format(domain.DateLayout), status)
	if err != nil {
		return RoomsAvailability{}, storage.Translate(op, err)
	}
	defer rows.Close()
	dates := q.Range.Dates()
	out := RoomsAvailability{HotelID: q.HotelID, Items: []RoomAvailability{}}
	var hotelStatus string
	var typeStatus *string
	found := false
	for rows.Next() {
		found = true
		var id, roomType *int64
		var number, st, hk *string
		var firsts, afters []int32
		if err := rows.Scan(&hotelStatus, &typeStatus, &id, &number, &roomType, &st, &hk, &firsts, &afters); err != nil {
			return RoomsAvailability{}, storage.Translate(op, err)
		}
		if id == nil { // no room matches
			continue
		}
		r := RoomAvailability{RoomID: *id, Number: *number, RoomTypeID: *roomType, Status: *st,
			HousekeepingStatus: *hk, ReservedDates: []string{}, AvailableDates: []string{}}
		reserved := make([]bool, len(dates))
		for k, first := range firsts {
			if first < 0 || int(afters[k]) > len(dates) {
				return RoomsAvailability{}, fmt.Errorf("%s: stay [%d, %d) out of range", op, first, afters[k])
			}
			for i := first; i < afters[k]; i++ {
				reserved[i] = true
			}
		}
		sellable := r.Status == domain.StatusActive && (!q.ExcludeDirty || r.HousekeepingStatus != domain.HousekeepingDirty)
		for i, d := range dates {
			switch {
			case reserved[i]:
				r.ReservedDates = append(r.ReservedDates, d.Format(domain.DateLayout))
			case sellable:
				r.AvailableDates = append(r.AvailableDates, d.Format(domain.DateLayout))
			}
		}
		out.Items = append(out.Items, r)
	}
	if err := rows.Err(); err != nil {
		return RoomsAvailability{}, storage.Translate(op, err)
	}
	if !found {
		return RoomsAvailability{}, errNoHotel
	}
	if err := scope(q, hotelStatus, typeStatus); err != nil {
		return RoomsAvailability{}, err
	}
	return out, nil
}

// mountAvailability adds the availability reads of seed 001 §4 (staff and
// admin) and the public, per-IP rate-limited copy of the aggregate.
func (h *handlers) mountAvailability(v1 fiber.Router, av *Availability, public fiber.Handler) {
	staff := api.RequireRole(domain.RoleStaff, domain.RoleAdmin)
	hotel := func(c *fiber.Ctx) error {
		q, err := parseAvailability(c, false)
		if err != nil {
			return err
		}
		out, err := av.Hotel(c.UserContext(), q, time.Now())
		if err != nil {
			return err
		}
		return c.JSON(out)
	}
	v1.Get("/hotels/:hotelId/availability", staff, hotel)
	v1.Get("/public/hotels/:hotelId/availability", public, hotel)
	v1.Get("/hotels/:hotelId/availability/rooms", staff, func(c *fiber.Ctx) error {
		q, err := parseAvailability(c, false)
		if err != nil {
			return err
		}
		status := domain.StatusActive
		if args := c.Context().QueryArgs(); args.Has("status") {
			status = string(args.Peek("status"))
			if oneOf("status", status, domain.StatusActive, domain.StatusInactive, domain.StatusOutOfService) != nil {
				return invalidFilter("status", "status must be one of Active, Inactive, OutOfService")
			}
		}
		out, err := av.Rooms(c.UserContext(), q, status)
		if err != nil {
			return err
		}
		return c.JSON(out)
	})
	v1.Get("/hotels/:hotelId/availability/check", staff, func(c *fiber.Ctx) error {
		q, err := parseAvailability(c, true)
		if err != nil {
			return err
		}
		out, err := av.Check(c.UserContext(), q, time.Now())
		if err != nil {
			return err
		}
		return c.JSON(out)
	})
}

func invalidFilter(field, message string) *domain.Problem {
	return domain.NewProblem(domain.CodeInvalidFilter, "%s", message).WithMeta("field", field)
}

// parseAvailability reads the hotel id, the date range and the filters
// every availability endpoint shares. A filter that is present must be
// valid, even when empty.
func parseAvailability(c *fiber.Ctx, roomTypeRequired bool) (AvailabilityQuery, error) {
	var q AvailabilityQuery
	var err error
	if q.HotelID, err = api.PathID(c, "hotelId"); err != nil {
		return q, err
	}
	args := c.Context().QueryArgs()
	if q.Range, err = domain.ParseDateRange(string(args.Peek("from")), string(args.Peek("to"))); err != nil {
		return q, err
	}
	switch {
	case args.Has("roomTypeId"):
		n, err := strconv.ParseInt(string(args.Peek("roomTypeId")), 10, 64)
		if err != nil || n <= 0 {
			return q, invalidFilter("roomTypeId", "roomTypeId must be a positive integer")
		}
		q.RoomTypeID = n
	case roomTypeRequired:
		return q, invalidFilter("roomTypeId", "roomTypeId is required")
	}
	if args.Has("excludeDirty") {
		switch string(args.Peek("excludeDirty")) {
		case "true":
			q.ExcludeDirty = true
		case "false":
		default:
			return q, invalidFilter("excludeDirty", "excludeDirty must be true or false")
		}
	}
	return q, nil
}
