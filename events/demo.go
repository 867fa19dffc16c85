package events

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DemoEvent is the name of the event SeedDemo creates.
const DemoEvent = "holdfast Demo Concert"

// SeedDemo creates the demo event (100 seats, one person choosing at a
// time so that two browser tabs show a line, no entry token for FCFS)
// unless it exists and returns its id; running it again changes nothing.
func SeedDemo(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var id int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('holdfast demo events'))`); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `SELECT id FROM events WHERE name = $1 ORDER BY id LIMIT 1`, DemoEvent).Scan(&id)
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO events (name, total_seats, max_concurrent, token_ttl_seconds)
			VALUES ($1, 100, 1, 300) RETURNING id`, DemoEvent).Scan(&id); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO seats (event_id, label) SELECT $1, 'R' || g FROM generate_series(1, 100) g ORDER BY g`, id)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("events: seed demo: %w", err)
	}
	return id, nil
}
