package events

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/events/draw"
	"github.com/holdfast/holdfast/storage"
)

// Event is an event and its settings.
type Event struct {
	EventID                int64  `json:"eventId"`
	Name                   string `json:"name"`
	TotalSeats             int    `json:"totalSeats"`
	MaxConcurrent          int    `json:"maxConcurrent"`
	TokenTTLSeconds        int    `json:"tokenTtlSeconds"`
	EntryTokenRequired     bool   `json:"entryTokenRequired"`
	FCFSEntryTokenRequired bool   `json:"fcfsEntryTokenRequired"`
	SeatHoldSeconds        int    `json:"seatHoldSeconds"`
	MaxSeatsPerUser        int    `json:"maxSeatsPerUser"`
	RoomSettings
	CreatedAt time.Time `json:"createdAt"`
	Details

	seed     []byte     // the shuffle seed: secret until SalesStartAt
	version  int64      // settings_version
	sealedAt *time.Time // when the pre-queue was sealed (seal.go)
	soldOut  bool       // sold out through seat holds once (events.sold_out_at)
}

// RoomSettings are the waiting room's settings a visitor plans by (SPEC
// §6.1), shown by the admin's and the public view of an event alike.
type RoomSettings struct {
	PresenceTimeoutSeconds int        `json:"presenceTimeoutSeconds"`
	ClaimWindowSeconds     int        `json:"claimWindowSeconds"`
	AdmitPerMinute         *int       `json:"admitPerMinute"`
	AdmissionPaused        bool       `json:"admissionPaused"`
	QueueOpensAt           *time.Time `json:"queueOpensAt"`
	SalesStartAt           *time.Time `json:"salesStartAt"`
	ReturnURL              *string    `json:"returnUrl"`
	ShuffleCommitment      string     `json:"shuffleCommitment"`
}

// inPrequeue reports whether an entry accepted at t joins the pre-queue.
func (e Event) inPrequeue(t time.Time) bool {
	return e.SalesStartAt != nil && t.Before(*e.SalesStartAt)
}

// queueOpen reports whether the queue takes entries at t.
func (e Event) queueOpen(t time.Time) bool {
	return e.QueueOpensAt == nil || !t.Before(*e.QueueOpensAt)
}

// member is user's name in the event's waiting room: its pseudonym.
func (e Event) member(user string) string { return draw.Pseudonym(e.seed, user) }

// Public is the unauthenticated view of an event: its seats, and the
// waiting-room settings a visitor plans by. ShuffleSeed is null until the
// pre-queue is sealed: by then the sale has started by Postgres' clock,
// which closed the pre-queue, so no API whose clock runs ahead shows the
// seed while entries may still join the draw it decides.
type Public struct {
	EventID        int64  `json:"eventId"`
	Name           string `json:"name"`
	TotalSeats     int    `json:"totalSeats"`
	RemainingSeats int    `json:"remainingSeats"`
	RoomSettings
	ShuffleSeed *string `json:"shuffleSeed"`
	Details
	SeatHoldSeconds int `json:"seatHoldSeconds"`
	MaxSeatsPerUser int `json:"maxSeatsPerUser"`
}

// public is e's public view with remaining seats.
func (e Event) public(remaining int) Public {
	p := Public{EventID: e.EventID, Name: e.Name, TotalSeats: e.TotalSeats, RemainingSeats: remaining,
		RoomSettings: e.RoomSettings, Details: e.Details, SeatHoldSeconds: e.SeatHoldSeconds, MaxSeatsPerUser: e.MaxSeatsPerUser}
	if e.SalesStartAt != nil && e.sealedAt != nil {
		seed := hex.EncodeToString(e.seed)
		p.ShuffleSeed = &seed
	}
	return p
}

// Seat is one seat, where it is on the map, and whether it is taken.
type Seat struct {
	SeatID int64  `json:"seatId"`
	Label  string `json:"label"`
	// Status is available, held (in a hold not yet expired) or reserved
	// (booked, or confirmed from a hold).
	Status    string `json:"status"`
	Section   string `json:"section"`
	Row       string `json:"row"`
	Position  int    `json:"position"` // in its row: neighbours differ by one
	PriceTier string `json:"priceTier"`
}

// Catalog is the Postgres side of events.
type Catalog struct {
	pool *pgxpool.Pool
}

// NewCatalog returns a Catalog on pool.
func NewCatalog(pool *pgxpool.Pool) *Catalog { return &Catalog{pool: pool} }

// EventKey is an event's serialization key.
func EventKey(id int64) string { return "events:ev:" + strconv.FormatInt(id, 10) }

// CreateEvent stores an event with its seat map (nil: e.TotalSeats seats
// "1".."n" in one section) and a fresh shuffle seed.
func (c *Catalog) CreateEvent(ctx context.Context, e Event, m SeatMap) (Event, error) {
	if m == nil {
		m = plainMap(plainLabels(e.TotalSeats))
	}
	seats := m.seats()
	e.TotalSeats = len(seats)
	seed, err := draw.NewSeed()
	if err != nil {
		return e, err
	}
	e.seed, e.ShuffleCommitment, e.version = seed, draw.Commitment(seed), 1
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO events (name, total_seats, max_concurrent, token_ttl_seconds,
				entry_token_required, fcfs_entry_token_required, presence_timeout_seconds, claim_window_seconds,
				admit_per_minute, admission_paused, queue_opens_at, sales_start_at, return_url, shuffle_seed,
				seat_hold_seconds, max_seats_per_user, starts_at, venue, image_url)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19) RETURNING id, created_at`,
			e.Name, e.TotalSeats, e.MaxConcurrent, e.TokenTTLSeconds, e.EntryTokenRequired, e.FCFSEntryTokenRequired,
			e.PresenceTimeoutSeconds, e.ClaimWindowSeconds, e.AdmitPerMinute, e.AdmissionPaused,
			e.QueueOpensAt, e.SalesStartAt, e.ReturnURL, e.seed, e.SeatHoldSeconds, e.MaxSeatsPerUser,
			e.StartsAt, e.Venue, e.ImageURL).Scan(&e.EventID, &e.CreatedAt); err != nil {
			return err
		}
		return insertSeatMap(ctx, tx, e.EventID, m, seats)
	})
	if err != nil {
		return e, storage.Translate("events: create event", err)
	}
	// Give the planner the new seats' numbers now: without them it takes a
	// fresh event for a few dozen seats and reads all of its free seats for
	// every FCFS batch, where walking the free-seat index to the batch's
	// size is enough. Best effort, as the event exists already: a role that
	// may not analyze only gets a warning, and its plans improve once
	// autovacuum has analyzed the table; SKIP_LOCKED leaves the table to a
	// vacuum or analyze already at work on it instead of waiting.
	_, _ = c.pool.Exec(ctx, `ANALYZE (SKIP_LOCKED) seats`)
	return e, nil
}

// eventColumns are the columns scanEvent reads, in its order.
const eventColumns = `id, name, total_seats, max_concurrent, token_ttl_seconds, entry_token_required,
	fcfs_entry_token_required, presence_timeout_seconds, claim_window_seconds, admit_per_minute, admission_paused,
	queue_opens_at, sales_start_at, return_url, shuffle_seed, settings_version, prequeue_sealed_at, created_at,
	seat_hold_seconds, max_seats_per_user, starts_at, venue, image_url, sold_out_at IS NOT NULL`

func scanEvent(row pgx.Row) (Event, error) {
	var e Event
	err := row.Scan(&e.EventID, &e.Name, &e.TotalSeats, &e.MaxConcurrent, &e.TokenTTLSeconds, &e.EntryTokenRequired,
		&e.FCFSEntryTokenRequired, &e.PresenceTimeoutSeconds, &e.ClaimWindowSeconds, &e.AdmitPerMinute, &e.AdmissionPaused,
		&e.QueueOpensAt, &e.SalesStartAt, &e.ReturnURL, &e.seed, &e.version, &e.sealedAt, &e.CreatedAt,
		&e.SeatHoldSeconds, &e.MaxSeatsPerUser, &e.StartsAt, &e.Venue, &e.ImageURL, &e.soldOut)
	e.ShuffleCommitment = draw.Commitment(e.seed)
	for _, t := range []**time.Time{&e.QueueOpensAt, &e.SalesStartAt, &e.sealedAt, &e.StartsAt} {
		if *t != nil {
			u := (*t).UTC()
			*t = &u
		}
	}
	return e, err
}

// Event reads an event's settings.
func (c *Catalog) Event(ctx context.Context, id int64) (Event, error) {
	e, err := scanEvent(c.pool.QueryRow(ctx, `SELECT `+eventColumns+` FROM events WHERE id = $1`, id))
	return e, storage.Translate("events: event", err)
}

// eventIn reads an event's settings in tx.
func eventIn(ctx context.Context, tx pgx.Tx, id int64) (Event, error) {
	e, err := scanEvent(tx.QueryRow(ctx, `SELECT `+eventColumns+` FROM events WHERE id = $1`, id))
	return e, storage.Translate("events: event", err)
}

// UpdateSettings changes an event's settings with change, which sees them
// as they stand (the row locked) and Postgres' clock, and returns them
// changed or an error. Whether the queue has opened or the sale started is
// decided by the clock that decides who joins the pre-queue and when it is
// sealed, not by the API's.
func (c *Catalog) UpdateSettings(ctx context.Context, id int64, change func(cur Event, now time.Time) (Event, error)) (Event, error) {
	var e Event
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		cur, err := scanEvent(tx.QueryRow(ctx, `SELECT `+eventColumns+` FROM events WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return err
		}
		var now time.Time
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			return err
		}
		if e, err = change(cur, now); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `UPDATE events SET max_concurrent = $2, token_ttl_seconds = $3, entry_token_required = $4,
				fcfs_entry_token_required = $5, presence_timeout_seconds = $6, claim_window_seconds = $7,
				admit_per_minute = $8, admission_paused = $9, queue_opens_at = $10, sales_start_at = $11,
				return_url = $12, seat_hold_seconds = $13, max_seats_per_user = $14, settings_version = settings_version + 1,
				starts_at = $15, venue = $16, image_url = $17
			WHERE id = $1 RETURNING settings_version`, id, e.MaxConcurrent, e.TokenTTLSeconds, e.EntryTokenRequired,
			e.FCFSEntryTokenRequired, e.PresenceTimeoutSeconds, e.ClaimWindowSeconds, e.AdmitPerMinute,
			e.AdmissionPaused, e.QueueOpensAt, e.SalesStartAt, e.ReturnURL, e.SeatHoldSeconds, e.MaxSeatsPerUser,
			e.StartsAt, e.Venue, e.ImageURL).Scan(&e.version)
	})
	return e, storage.Translate("events: update settings", err)
}

// HasSeat reports whether seat is one of event's: seat ids are global, so a
// booking names both.
func (c *Catalog) HasSeat(ctx context.Context, event, seat int64) (bool, error) {
	var ok bool
	err := c.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM seats WHERE id = $1 AND event_id = $2)`, seat, event).Scan(&ok)
	return ok, storage.Translate("events: seat", err)
}

// seatsSQL lists event $1's seats with status $2 (” for all), judging a
// hold by its expiry at Postgres' clock: a seat of a hold past its time is
// available from that instant, swept or not.
const seatsSQL = `SELECT * FROM (
	SELECT s.id, s.label, CASE WHEN NOT s.reserved OR (h.status = 'HELD' AND h.expires_at <= now()) THEN 'available'
			WHEN h.status = 'HELD' THEN 'held' ELSE 'reserved' END AS status,
		s.section, s.row_label, s.pos, coalesce(x.price_tier, '')
	FROM seats s LEFT JOIN seat_holds h ON h.id = s.hold_id
		LEFT JOIN event_sections x ON x.event_id = s.event_id AND x.name = s.section
	WHERE s.event_id = $1) AS m
	WHERE $2 = '' OR status = $2 ORDER BY id`

// Seats lists an event's seats: status "" for all, or available, held or
// reserved.
func (c *Catalog) Seats(ctx context.Context, id int64, status string) ([]Seat, []SectionInfo, error) {
	if _, err := c.Event(ctx, id); err != nil {
		return nil, nil, err
	}
	rows, err := c.pool.Query(ctx, seatsSQL, id, status)
	if err != nil {
		return nil, nil, storage.Translate("events: seats", err)
	}
	seats, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Seat])
	if seats == nil {
		seats = []Seat{}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("events: seats: %w", err)
	}
	rows, err = c.pool.Query(ctx, `SELECT name, price_tier, preference FROM event_sections
		WHERE event_id = $1 ORDER BY preference`, id)
	if err != nil {
		return nil, nil, storage.Translate("events: sections", err)
	}
	sections, err := pgx.CollectRows(rows, pgx.RowToStructByPos[SectionInfo])
	return seats, sections, storage.Translate("events: sections", err)
}

// maxPrequeuePage bounds one page of the pre-queue's entrants.
const maxPrequeuePage = 10_000

// PrequeuePage is one page of an event's pre-queue entrants, with what a
// verifier needs beside them (GET /api/v1/public/events/{id}/prequeue).
type PrequeuePage struct {
	EventID           int64      `json:"eventId"`
	SalesStartAt      *time.Time `json:"salesStartAt"`
	Sealed            bool       `json:"sealed"` // the list is complete
	ShuffleCommitment string     `json:"shuffleCommitment"`
	ShuffleSeed       *string    `json:"shuffleSeed"`
	Total             int        `json:"total"`
	Entrants          []string   `json:"entrants"` // pseudonyms, in entry order
	NextOffset        *int       `json:"nextOffset"`
}

// PrequeueEntrants returns limit pseudonyms of ev's pre-queue from offset,
// in entry order (none for limit 0), and how many there are.
func (c *Catalog) PrequeueEntrants(ctx context.Context, ev int64, offset, limit int) ([]string, int, error) {
	var total int
	if err := c.pool.QueryRow(ctx, `SELECT count(*) FROM prequeue_entries WHERE event_id = $1`, ev).Scan(&total); err != nil {
		return nil, 0, storage.Translate("events: prequeue", err)
	}
	rows, err := c.pool.Query(ctx, `SELECT pseudonym FROM prequeue_entries WHERE event_id = $1
		ORDER BY seq OFFSET $2 LIMIT $3`, ev, offset, limit)
	if err != nil {
		return nil, 0, storage.Translate("events: prequeue", err)
	}
	page, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if page == nil {
		page = []string{}
	}
	return page, total, storage.Translate("events: prequeue", err)
}

// Holds lists user's seat holds of event ev, newest first, a hold held
// past its expiry read as expired (Postgres' clock) whether swept or not.
// At most maxHoldsListed: a user holds a few seats at a time.
func (c *Catalog) Holds(ctx context.Context, ev int64, user string) ([]HoldResult, error) {
	rows, err := c.pool.Query(ctx, `SELECT id, user_id, seat_ids,
			CASE WHEN status = 'HELD' AND expires_at <= now() THEN 'EXPIRED' ELSE status END,
			expires_at, payment_reference, created_at
		FROM seat_holds WHERE event_id = $1 AND user_id = $2 ORDER BY id DESC LIMIT $3`, ev, user, maxHoldsListed)
	if err != nil {
		return nil, storage.Translate("events: holds", err)
	}
	holds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (HoldResult, error) {
		x := &hold{event: ev}
		err := r.Scan(&x.id, &x.user, &x.seats, &x.status, &x.expires, &x.payment, &x.createdAt)
		return x.result(), err
	})
	if holds == nil {
		holds = []HoldResult{}
	}
	return holds, storage.Translate("events: holds", err)
}

// maxHoldsListed bounds the holds listed for one user.
const maxHoldsListed = 100

// SeatsOf reports whether every seat of ids is one of ev's, and whether
// section (when not empty) is one of its sections.
func (c *Catalog) SeatsOf(ctx context.Context, ev int64, ids []int64, section string) (seatsOK, sectionOK bool, err error) {
	err = c.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM seats WHERE event_id = $1 AND id = ANY($2)) = coalesce(cardinality($2::bigint[]), 0),
			$3 = '' OR EXISTS (SELECT 1 FROM event_sections WHERE event_id = $1 AND name = $3)`,
		ev, ids, section).Scan(&seatsOK, &sectionOK)
	return seatsOK, sectionOK, storage.Translate("events: seats", err)
}
