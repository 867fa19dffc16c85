package baseline

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultSchema is the Postgres schema of mode's tables unless
// Options.Schema says otherwise: fcfs_baseline, cart_baseline,
// hold_baseline or group_baseline.
func DefaultSchema(mode Mode) string {
	if mode == Lean {
		return "fcfs_baseline"
	}
	return string(mode) + "_baseline"
}

// Setup makes mode's tables in schema. The lean mode's are made afresh,
// holding seats free seats; the others' are created if missing and keep
// what is there, so runs can share them (each writes a fixture of its own,
// fixtures.go).
//
//   - lean: the seed's seats table, one-seat-per-user as a unique index, and
//     a partial index on the free seats: the one holdfast's seats table has
//     (seats_free), so the comparison is between designs, not between
//     indexes. Without it every allocation walks past all the seats taken.
//   - cart: products, their options (each with its stock_quantity and
//     is_active), and seed 002's INVENTORY_RESERVATION with the seed's three
//     indexes (§4). Options hold their stock themselves; the seed's separate
//     INVENTORY row would be one more row to lock per line.
//   - hold: hotels, room types and rooms; seed 000's RoomTypeStock, one row
//     per room type and night with its reserved count, the rows a hold
//     locks; holds, with their clientHoldKey bindings (seed 000's
//     hold:snapshot); and stays, where an exclusion constraint keeps a room
//     from being booked twice on a night, as holdfast's stay_reservations
//     does.
//   - group: events; seat_rows, one per row of a map, in the map's order of
//     preference, the rows a hold locks, with sold_out once every seat of
//     the row is sold; seats, with the hold that holds or sold each and
//     until when it holds it; and seat_holds.
func Setup(ctx context.Context, pool *pgxpool.Pool, mode Mode, schema string, seats int) error {
	if seats < 0 {
		return fmt.Errorf("baseline: setup: negative seat count %d", seats)
	}
	ddl, ok := map[Mode]string{Lean: leanDDL, Cart: cartDDL, Holds: holdDDL, Group: groupDDL}[mode]
	if !ok {
		return fmt.Errorf("baseline: setup: unknown mode %q", mode)
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf(ddl, pgx.Identifier{schema}.Sanitize(), seats)); err != nil {
		return fmt.Errorf("baseline: setup %s %s: %w", mode, schema, err)
	}
	return nil
}

// The modes' DDL: %[1]s is the schema, %[2]d the lean mode's seats.
const (
	leanDDL = `
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
		INSERT INTO %[1]s.seats (status) SELECT false FROM generate_series(1, %[2]d);`
	cartDDL = `
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
			ON %[1]s.inventory_reservations (expires_at);`
	holdDDL = `
		CREATE EXTENSION IF NOT EXISTS btree_gist;
		CREATE SCHEMA IF NOT EXISTS %[1]s;
		CREATE TABLE IF NOT EXISTS %[1]s.hotels (
			id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			name text NOT NULL
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
		);`
	groupDDL = `
		CREATE SCHEMA IF NOT EXISTS %[1]s;
		CREATE TABLE IF NOT EXISTS %[1]s.events (
			id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			name               text    NOT NULL,
			total_seats        integer NOT NULL,
			seat_hold_seconds  integer NOT NULL,
			max_seats_per_user integer NOT NULL
		);
		CREATE TABLE IF NOT EXISTS %[1]s.seat_rows (
			id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			event_id   bigint  NOT NULL REFERENCES %[1]s.events,
			section    text    NOT NULL,
			row_no     integer NOT NULL,
			preference integer NOT NULL,
			sold_out   boolean NOT NULL DEFAULT false
		);
		CREATE INDEX IF NOT EXISTS seat_rows_order ON %[1]s.seat_rows (event_id, preference) WHERE NOT sold_out;
		CREATE TABLE IF NOT EXISTS %[1]s.seats (
			id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			event_id   bigint  NOT NULL REFERENCES %[1]s.events,
			row_id     bigint  NOT NULL REFERENCES %[1]s.seat_rows,
			section    text    NOT NULL,
			row_label  text    NOT NULL,
			row_no     integer NOT NULL,
			pos        integer NOT NULL,
			hold_id    bigint,
			held_until timestamptz,
			sold       boolean NOT NULL DEFAULT false
		);
		CREATE INDEX IF NOT EXISTS seats_row_unsold ON %[1]s.seats (row_id, pos) WHERE NOT sold;
		CREATE INDEX IF NOT EXISTS seats_unsold ON %[1]s.seats (event_id) WHERE NOT sold;
		CREATE TABLE IF NOT EXISTS %[1]s.seat_holds (
			id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			event_id          bigint      NOT NULL REFERENCES %[1]s.events,
			user_id           text        NOT NULL,
			seat_ids          bigint[]    NOT NULL,
			status            text        NOT NULL CHECK (status IN ('HELD', 'CONFIRMED')),
			expires_at        timestamptz NOT NULL,
			payment_reference text,
			created_at        timestamptz NOT NULL,
			updated_at        timestamptz NOT NULL
		);
		CREATE INDEX IF NOT EXISTS seat_holds_user ON %[1]s.seat_holds (event_id, user_id);`
)
