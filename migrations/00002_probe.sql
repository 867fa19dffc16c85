-- +goose Up
-- The probe write type (package probe) exercises the pipeline: a bounded
-- counter per key whose read-modify-write loses updates unless requests on a
-- key are serialized, and a log of every application.
CREATE TABLE probe_counters (
    key   text PRIMARY KEY,
    value bigint NOT NULL DEFAULT 0
);

-- No unique constraint on (request_id, key) on purpose: a request applied
-- twice must show up as two rows, not as a constraint error. tx identifies
-- the transaction, so batches are visible.
CREATE TABLE probe_log (
    request_id uuid        NOT NULL,
    key        text        NOT NULL,
    value      bigint      NOT NULL,
    worker     text        NOT NULL,
    tx         bigint      NOT NULL DEFAULT txid_current(),
    started_at timestamptz NOT NULL,
    ended_at   timestamptz NOT NULL
);
CREATE INDEX probe_log_key ON probe_log (key, value);

-- +goose Down
DROP TABLE probe_log;
DROP TABLE probe_counters;
