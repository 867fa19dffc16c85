package events

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/storage"
)

// Event is an event and its settings.
type Event struct {
	EventID                int64     `json:"eventId"`
	Name                   string    `json:"name"`
	TotalSeats             int       `json:"totalSeats"`
	MaxConcurrent          int       `json:"maxConcurrent"`
	TokenTTLSeconds        int       `json:"tokenTtlSeconds"`
	EntryTokenRequired     bool      `json:"entryTokenRequired"`
	FCFSEntryTokenRequired bool      `json:"fcfsEntryTokenRequired"`
	CreatedAt              time.Time `json:"createdAt"`
}

// Public is the unauthenticated view of an event.
type Public struct {
	EventID        int64  `json:"eventId"`
	Name           string `json:"name"`
	TotalSeats     int    `json:"totalSeats"`
	RemainingSeats int    `json:"remainingSeats"`
}

// Seat is one seat and whether it is taken.
type Seat struct {
	SeatID int64  `json:"seatId"`
	Label  string `json:"label"`
	Status string `json:"status"` // available | reserved
}

// Catalog is the Postgres side of events.
type Catalog struct {
	pool *pgxpool.Pool
}

// NewCatalog returns a Catalog on pool.
func NewCatalog(pool *pgxpool.Pool) *Catalog { return &Catalog{pool: pool} }

// EventKey is an event's serialization key.
func EventKey(id int64) string { return "events:ev:" + strconv.FormatInt(id, 10) }

// CreateEvent stores an event with its seats: the given labels, or "1".."n".
func (c *Catalog) CreateEvent(ctx context.Context, e Event, labels []string) (Event, error) {
	if labels == nil {
		labels = make([]string, e.TotalSeats)
		for i := range labels {
			labels[i] = strconv.Itoa(i + 1)
		}
	}
	e.TotalSeats = len(labels)
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO events (name, total_seats, max_concurrent, token_ttl_seconds,
				entry_token_required, fcfs_entry_token_required)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING id, created_at`, e.Name, e.TotalSeats, e.MaxConcurrent,
			e.TokenTTLSeconds, e.EntryTokenRequired, e.FCFSEntryTokenRequired).Scan(&e.EventID, &e.CreatedAt); err != nil {
			return err
		}
		// Seat ids follow the labels' order, so FCFS hands them out in it.
		_, err := tx.Exec(ctx, `INSERT INTO seats (event_id, label)
			SELECT $1, label FROM unnest($2::text[]) WITH ORDINALITY AS l(label, n) ORDER BY n`, e.EventID, labels)
		return err
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

// Event reads an event's settings.
func (c *Catalog) Event(ctx context.Context, id int64) (Event, error) {
	e := Event{EventID: id}
	err := c.pool.QueryRow(ctx, `SELECT name, total_seats, max_concurrent, token_ttl_seconds, entry_token_required,
			fcfs_entry_token_required, created_at FROM events WHERE id = $1`, id).
		Scan(&e.Name, &e.TotalSeats, &e.MaxConcurrent, &e.TokenTTLSeconds, &e.EntryTokenRequired, &e.FCFSEntryTokenRequired, &e.CreatedAt)
	return e, storage.Translate("events: event", err)
}

// Seats lists an event's seats: status "" for all, or available/reserved.
func (c *Catalog) Seats(ctx context.Context, id int64, status string) ([]Seat, error) {
	if _, err := c.Event(ctx, id); err != nil {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, `SELECT id, label, CASE WHEN reserved THEN 'reserved' ELSE 'available' END
		FROM seats WHERE event_id = $1 AND ($2 = '' OR reserved = ($2 = 'reserved')) ORDER BY id`, id, status)
	if err != nil {
		return nil, storage.Translate("events: seats", err)
	}
	seats, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Seat])
	if seats == nil {
		seats = []Seat{}
	}
	if err != nil {
		return nil, fmt.Errorf("events: seats: %w", err)
	}
	return seats, nil
}
