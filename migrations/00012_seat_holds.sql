-- +goose Up
-- Ticketing as fans use it (SPEC §6.3): a seat map of sections, rows and
-- seats; seats held for a while by a user, then confirmed as an order or
-- released.
--
-- event_sections: a section's place in the order of preference (1 is the
-- best) and its price tier. An event created with seatCount has one
-- section, "General", of one row, "1".
-- seats.row_no orders a section's rows (0 is the best) and seats.pos a
-- row's seats: seats next to each other have consecutive positions.
-- Seat ids follow sections by preference, then rows, then positions, so
-- FCFS still hands the best seat out first.
-- seats.hold_id is the hold a seat belongs to while it is held or sold
-- through a hold; such a seat is reserved, as a seat FCFS or the one-seat
-- booking took. A HELD hold whose expires_at has passed holds nothing any
-- more: every reader judges it by its expiry, and the next write on the
-- event (or the periodic task) marks it EXPIRED and frees its seats.
-- events.fcfs_after replaces each worker's memory of the last seat FCFS
-- granted: FCFS looks for free seats after it, and freeing a seat lowers it.
-- events.sold_out_at is when a batch of seat holds first left no seat: from
-- then on the waiting room offers each seat that comes free to its line.
CREATE TABLE event_sections (
    event_id   bigint  NOT NULL REFERENCES events,
    name       text    NOT NULL CHECK (name <> ''),
    preference integer NOT NULL CHECK (preference > 0),
    price_tier text    NOT NULL DEFAULT '',
    PRIMARY KEY (event_id, name)
);
INSERT INTO event_sections (event_id, name, preference) SELECT id, 'General', 1 FROM events;

ALTER TABLE events
    ADD COLUMN seat_hold_seconds integer NOT NULL DEFAULT 600 CHECK (seat_hold_seconds BETWEEN 1 AND 86400),
    ADD COLUMN max_seats_per_user integer NOT NULL DEFAULT 6 CHECK (max_seats_per_user BETWEEN 1 AND 100),
    ADD COLUMN fcfs_after bigint NOT NULL DEFAULT 0,
    ADD COLUMN sold_out_at timestamptz;

ALTER TABLE seats
    ADD COLUMN section text    NOT NULL DEFAULT 'General',
    ADD COLUMN row_label text  NOT NULL DEFAULT '1',
    ADD COLUMN row_no  integer NOT NULL DEFAULT 0,
    ADD COLUMN pos     integer NOT NULL DEFAULT 0,
    ADD COLUMN hold_id bigint;
UPDATE seats s SET pos = n.pos FROM (
    SELECT id, row_number() OVER (PARTITION BY event_id ORDER BY id) AS pos FROM seats) n WHERE n.id = s.id;

CREATE TABLE seat_holds (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id          bigint      NOT NULL REFERENCES events,
    user_id           text        NOT NULL,
    seat_ids          bigint[]    NOT NULL,
    status            text        NOT NULL CHECK (status IN ('HELD', 'CONFIRMED', 'RELEASED', 'EXPIRED')),
    expires_at        timestamptz NOT NULL,
    payment_reference text,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL
);
-- A user's live holds and orders, for the per-user cap and the hold list.
CREATE INDEX seat_holds_user ON seat_holds (event_id, user_id);
-- The holds still to expire, for the sweep; the ended ones, for their deletion
-- a day on (events.holdRetention).
CREATE INDEX seat_holds_expiry ON seat_holds (event_id, expires_at) WHERE status = 'HELD';
CREATE INDEX seat_holds_ended ON seat_holds (updated_at) WHERE status IN ('RELEASED', 'EXPIRED');

-- +goose Down
DROP TABLE seat_holds;
ALTER TABLE seats DROP COLUMN section, DROP COLUMN row_label, DROP COLUMN row_no, DROP COLUMN pos, DROP COLUMN hold_id;
ALTER TABLE events DROP COLUMN seat_hold_seconds, DROP COLUMN max_seats_per_user, DROP COLUMN fcfs_after,
    DROP COLUMN sold_out_at;
DROP TABLE event_sections;
