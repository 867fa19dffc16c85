-- +goose Up
-- Events (seeds 003, 004): events with their seats and settings, and seat
-- reservations — one seat per user per event, a seat reserved at most once.
CREATE TABLE events (
    id                        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                      text        NOT NULL CHECK (name <> ''),
    total_seats               integer     NOT NULL CHECK (total_seats >= 0),
    max_concurrent            integer     NOT NULL DEFAULT 800 CHECK (max_concurrent > 0),
    token_ttl_seconds         integer     NOT NULL DEFAULT 300 CHECK (token_ttl_seconds > 0),
    entry_token_required      boolean     NOT NULL DEFAULT true,
    fcfs_entry_token_required boolean     NOT NULL DEFAULT false,
    created_at                timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE seats (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id   bigint      NOT NULL REFERENCES events,
    label      text        NOT NULL,
    reserved   boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (event_id, label)
);
-- FCFS takes the free seats of an event in id order.
CREATE INDEX seats_free ON seats (event_id, id) WHERE NOT reserved;

CREATE TABLE seat_reservations (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id   bigint      NOT NULL REFERENCES events,
    seat_id    bigint      NOT NULL UNIQUE REFERENCES seats, -- a seat is reserved at most once
    user_id    text        NOT NULL,
    phone      text,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (event_id, user_id) -- one seat per user per event
);

-- +goose Down
DROP TABLE seat_reservations;
DROP TABLE seats;
DROP TABLE events;
