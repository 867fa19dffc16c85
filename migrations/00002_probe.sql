-- +goose Up
-- The probe write type (package probe) exercises the pipeline: a bounded
-- counter per key whose read-modify-write loses updates unless requests on a
-- key are serialized, and a log of every application.
CREATE TABLE probe_counters (
    key   text PRIMARY KEY,
    value bigint NOT NULL DEFAULT 0
);

CREATE TABLE probe_log (
    request_id uuid        NOT NULL,
    key        text        NOT NULL,
    value      bigint      NOT NULL,
    worker     text        NOT NULL,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz NOT NULL,
    PRIMARY KEY (request_id, key)
);

-- +goose Down
DROP TABLE probe_log;
DROP TABLE probe_counters;
