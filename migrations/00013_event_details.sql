-- +goose Up
-- What an event's pages show of it (issue 49): when it starts, where, and
-- an image of the operator's choosing. All optional; the API bounds them
-- (venue 200 characters, image_url an https URL of at most 2,000), and the
-- checks below keep a direct write from exceeding the same bounds.
ALTER TABLE events
    ADD COLUMN starts_at timestamptz,
    ADD COLUMN venue text CHECK (char_length(venue) BETWEEN 1 AND 200),
    ADD COLUMN image_url text CHECK (length(image_url) <= 2000 AND image_url LIKE 'https://%');

-- +goose Down
ALTER TABLE events
    DROP COLUMN image_url,
    DROP COLUMN venue,
    DROP COLUMN starts_at;
