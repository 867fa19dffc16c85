-- +goose Up
-- Stays (seeds 000, 001): hotels, room types, rooms and stay reservations.
CREATE EXTENSION IF NOT EXISTS btree_gist;

CREATE TABLE hotels (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text        NOT NULL CHECK (name <> ''),
    timezone   text        NOT NULL,
    currency   text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    status     text        NOT NULL DEFAULT 'Active' CHECK (status IN ('Active', 'Inactive')),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE room_types (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hotel_id   bigint      NOT NULL REFERENCES hotels,
    name       text        NOT NULL CHECK (name <> ''),
    status     text        NOT NULL DEFAULT 'Active' CHECK (status IN ('Active', 'Inactive')),
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (hotel_id, name)
);

CREATE TABLE rooms (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hotel_id            bigint      NOT NULL REFERENCES hotels,
    room_type_id        bigint      NOT NULL REFERENCES room_types,
    number              text        NOT NULL CHECK (number <> ''),
    status              text        NOT NULL DEFAULT 'Active' CHECK (status IN ('Active', 'Inactive', 'OutOfService')),
    housekeeping_status text        NOT NULL DEFAULT 'Clean' CHECK (housekeeping_status IN ('Clean', 'Dirty')),
    created_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (hotel_id, number)
);
CREATE INDEX rooms_type ON rooms (room_type_id) INCLUDE (status, housekeeping_status);

CREATE TABLE stay_reservations (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hotel_id     bigint      NOT NULL REFERENCES hotels,
    room_type_id bigint      NOT NULL REFERENCES room_types,
    room_id      bigint      NOT NULL REFERENCES rooms,
    user_id      text        NOT NULL,
    hold_id      text        UNIQUE, -- the hold it confirmed: confirming twice finds it
    check_in     date        NOT NULL,
    check_out    date        NOT NULL CHECK (check_out > check_in),
    stay         daterange   GENERATED ALWAYS AS (daterange(check_in, check_out, '[)')) STORED,
    status       text        NOT NULL CHECK (status IN ('Pending', 'Confirmed', 'CheckedIn', 'Cancelled', 'CheckedOut')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    -- No room is booked twice on a night.
    CONSTRAINT stay_reservations_no_double_booking
        EXCLUDE USING gist (room_id WITH =, stay WITH &&) WHERE (status IN ('Confirmed', 'CheckedIn'))
);
-- Availability: the stays of a hotel (or a room type) that hold a room over a date range.
CREATE INDEX stay_reservations_occupying ON stay_reservations USING gist (hotel_id, stay)
    WHERE status IN ('Confirmed', 'CheckedIn');
CREATE INDEX stay_reservations_type_occupying ON stay_reservations USING gist (room_type_id, stay)
    WHERE status IN ('Confirmed', 'CheckedIn');
CREATE INDEX stay_reservations_hotel ON stay_reservations (hotel_id, check_in);

-- +goose Down
DROP TABLE stay_reservations;
DROP TABLE rooms;
DROP TABLE room_types;
DROP TABLE hotels;
