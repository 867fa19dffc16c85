package baseline

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultSchema is the Postgres schema the baseline keeps its seats in.
const DefaultSchema = "fcfs_baseline"

// Setup drops and recreates schema with the seed's seats table holding
// seats free seats, one-seat-per-user as a unique index, and a partial index
// on the free seats: the one holdfast's seats table has (seats_free), so the
// comparison is between designs, not between indexes. Without it every
// allocation walks past all the seats already taken.
func Setup(ctx context.Context, pool *pgxpool.Pool, schema string, seats int) error {
	if seats < 0 {
		return fmt.Errorf("baseline: setup: negative seat count %d", seats)
	}
	s := pgx.Identifier{schema}.Sanitize()
	ddl := fmt.Sprintf(`
		DROP SCHEMA IF EXISTS %[1]s CASCADE;
		CREATE SCHEMA %[1]s;
		CREATE TABLE %[1]s.seats (
			id          bigserial PRIMARY KEY,
			status      boolean NOT NULL DEFAULT false,
			reserved_by text,
			phone       text,
			updated_at  timestamptz
		);
		CREATE UNIQUE INDEX seats_one_per_user ON %[1]s.seats (reserved_by) WHERE status;
		CREATE INDEX seats_free ON %[1]s.seats (id) WHERE NOT status;
		INSERT INTO %[1]s.seats (status) SELECT false FROM generate_series(1, %[2]d);`, s, seats)
	if _, err := pool.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("baseline: setup %s: %w", schema, err)
	}
	return nil
}
