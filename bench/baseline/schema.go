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

// DefaultHoldSchema is the Postgres schema of the hold mode's tables.
const DefaultHoldSchema = "hold_baseline"

// SetupHold creates schema with the hold mode's tables if they are missing,
// keeping what is there (each run creates a hotel of its own over HTTP):
// hotels, room types and rooms; seed 000's RoomTypeStock, one row per room
// type and night with its reserved count, the rows a hold locks; holds, with
// their clientHoldKey bindings (seed 000's hold:snapshot); and stays, where
// an exclusion constraint keeps a room from being booked twice on a night,
// as holdfast's stay_reservations does.
func SetupHold(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	s := pgx.Identifier{schema}.Sanitize()
	ddl := fmt.Sprintf(`
		CREATE EXTENSION IF NOT EXISTS btree_gist;
		CREATE SCHEMA IF NOT EXISTS %[1]s;
		CREATE TABLE IF NOT EXISTS %[1]s.hotels (
			id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			name     text NOT NULL,
			timezone text NOT NULL,
			currency text NOT NULL
		);
		CREATE TABLE IF NOT EXISTS %[1]s.room_types (
			id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			hotel_id bigint NOT NULL REFERENCES %[1]s.hotels,
			name     text   NOT NULL,
			UNIQUE (hotel_id, name)
		);
		CREATE TABLE IF NOT EXISTS %[1]s.rooms (
			id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			hotel_id     bigint NOT NULL REFERENCES %[1]s.hotels,
			room_type_id bigint NOT NULL REFERENCES %[1]s.room_types,
			number       text   NOT NULL,
			UNIQUE (hotel_id, number)
		);
		CREATE INDEX IF NOT EXISTS rooms_type ON %[1]s.rooms (room_type_id);
		CREATE TABLE IF NOT EXISTS %[1]s.room_type_stock (
			room_type_id bigint  NOT NULL REFERENCES %[1]s.room_types,
			stay_date    date    NOT NULL,
			reserved     integer NOT NULL DEFAULT 0 CHECK (reserved >= 0),
			PRIMARY KEY (room_type_id, stay_date)
		);
		CREATE TABLE IF NOT EXISTS %[1]s.holds (
			id              text        PRIMARY KEY,
			room_type_id    bigint      NOT NULL REFERENCES %[1]s.room_types,
			user_id         text        NOT NULL,
			client_hold_key uuid        NOT NULL,
			check_in        date        NOT NULL,
			check_out       date        NOT NULL CHECK (check_out > check_in),
			stay            daterange   GENERATED ALWAYS AS (daterange(check_in, check_out, '[)')) STORED,
			status          text        NOT NULL CHECK (status IN ('HELD', 'CONFIRMED', 'CANCELLED')),
			created_at      timestamptz NOT NULL,
			expires_at      timestamptz NOT NULL
		);
		CREATE INDEX IF NOT EXISTS holds_held ON %[1]s.holds USING gist (room_type_id, stay) WHERE status = 'HELD';
		CREATE INDEX IF NOT EXISTS holds_user_range ON %[1]s.holds (user_id, room_type_id, check_in, check_out) WHERE status = 'HELD';
		CREATE TABLE IF NOT EXISTS %[1]s.hold_keys (
			room_type_id    bigint NOT NULL,
			client_hold_key uuid   NOT NULL,
			check_in        date   NOT NULL,
			check_out       date   NOT NULL,
			hold_id         text   NOT NULL REFERENCES %[1]s.holds,
			PRIMARY KEY (room_type_id, client_hold_key, check_in, check_out)
		);
		CREATE TABLE IF NOT EXISTS %[1]s.stays (
			id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			hotel_id     bigint      NOT NULL REFERENCES %[1]s.hotels,
			room_type_id bigint      NOT NULL REFERENCES %[1]s.room_types,
			room_id      bigint      NOT NULL REFERENCES %[1]s.rooms,
			user_id      text        NOT NULL,
			hold_id      text        NOT NULL UNIQUE REFERENCES %[1]s.holds,
			check_in     date        NOT NULL,
			check_out    date        NOT NULL,
			stay         daterange   GENERATED ALWAYS AS (daterange(check_in, check_out, '[)')) STORED,
			status       text        NOT NULL CHECK (status = 'Confirmed'),
			created_at   timestamptz NOT NULL DEFAULT now(),
			CONSTRAINT stays_no_double_booking EXCLUDE USING gist (room_id WITH =, stay WITH &&)
		);`, s)
	if _, err := pool.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("baseline: setup hold %s: %w", schema, err)
	}
	return nil
}
