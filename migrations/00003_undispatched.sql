-- +goose Up
-- A request whose dispatch to Redis failed after it was made durable (and
-- answered 202). Apply transactions refuse to overtake such a request on its
-- keys (K3) until it has been put into its mailboxes; the partial index is
-- empty in normal operation, so that check costs one index probe per batch.
ALTER TABLE requests ADD COLUMN undispatched boolean NOT NULL DEFAULT false;
CREATE INDEX requests_undispatched ON requests (seq) WHERE undispatched;

-- +goose Down
DROP INDEX requests_undispatched;
ALTER TABLE requests DROP COLUMN undispatched;
