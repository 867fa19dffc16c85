-- +goose Up
-- How many of an event's seats are reserved, kept in the same transaction
-- as every reservation: the remaining-seat count is then one row's read
-- instead of a count of the event's free seats, so each batch that takes
-- seats can hand the exact count on to Redis.
ALTER TABLE events ADD COLUMN seats_taken integer NOT NULL DEFAULT 0 CHECK (seats_taken >= 0);
UPDATE events e SET seats_taken = (SELECT count(*) FROM seats s WHERE s.event_id = e.id AND s.reserved);

-- +goose Down
ALTER TABLE events DROP COLUMN seats_taken;
