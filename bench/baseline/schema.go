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

// DefaultCartSchema is the Postgres schema of the cart mode's tables.
const DefaultCartSchema = "cart_baseline"

// SetupCart creates schema with the cart mode's tables if they are missing:
// products, their options (each with its stock_quantity and is_active), and
// seed 002's INVENTORY_RESERVATION with the seed's three indexes (§4). It
// keeps what is there: each run creates options of its own (POST
// CartProductsPath), so runs can share the tables. Options hold their
// stock themselves; the seed's separate INVENTORY row would be one more
// row to lock per line.
func SetupCart(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	s := pgx.Identifier{schema}.Sanitize()
	ddl := fmt.Sprintf(`
		CREATE SCHEMA IF NOT EXISTS %[1]s;
		CREATE TABLE IF NOT EXISTS %[1]s.products (
			id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			name text NOT NULL
		);
		CREATE TABLE IF NOT EXISTS %[1]s.product_options (
			id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			product_id     bigint  NOT NULL REFERENCES %[1]s.products,
			option_code    text    NOT NULL UNIQUE,
			price          bigint  NOT NULL CHECK (price >= 0),
			stock_quantity integer NOT NULL CHECK (stock_quantity >= 0),
			is_active      boolean NOT NULL DEFAULT true
		);
		CREATE TABLE IF NOT EXISTS %[1]s.inventory_reservations (
			id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			product_option_id bigint      NOT NULL REFERENCES %[1]s.product_options,
			user_id           text        NOT NULL,
			quantity          integer     NOT NULL CHECK (quantity > 0),
			status            text        NOT NULL CHECK (status IN ('RESERVED', 'CONFIRMED', 'RELEASED', 'EXPIRED')),
			reserved_at       timestamptz NOT NULL,
			expires_at        timestamptz NOT NULL,
			updated_at        timestamptz NOT NULL
		);
		CREATE INDEX IF NOT EXISTS idx_inventory_reservation_product_option_status
			ON %[1]s.inventory_reservations (product_option_id, status);
		CREATE INDEX IF NOT EXISTS idx_inventory_reservation_user_status_expires
			ON %[1]s.inventory_reservations (user_id, status, expires_at);
		CREATE INDEX IF NOT EXISTS idx_inventory_reservation_expires_at
			ON %[1]s.inventory_reservations (expires_at);`, s)
	if _, err := pool.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("baseline: setup cart %s: %w", schema, err)
	}
	return nil
}
