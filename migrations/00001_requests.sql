-- +goose Up
-- Every accepted write, durable before its 202 is sent (SPEC §2). seq orders
-- per-key mailboxes (K3): a write sent after another's 202 gets a higher one.
CREATE TABLE requests (
    id           uuid PRIMARY KEY,
    seq          bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    type         text        NOT NULL,
    queue        text        NOT NULL,
    user_id      text        NOT NULL,
    keys         text[]      NOT NULL CHECK (cardinality(keys) > 0),
    payload      jsonb       NOT NULL,
    idem_route   text,
    idem_key     text,
    body_hash    bytea,
    trace_id     text        NOT NULL DEFAULT '',
    status       text        NOT NULL DEFAULT 'queued'
                 CHECK (status IN ('queued', 'processing', 'succeeded', 'rejected', 'failed')),
    result       jsonb,
    error        jsonb,
    accepted_at  timestamptz NOT NULL,
    started_at   timestamptz,
    completed_at timestamptz,
    CHECK ((idem_key IS NULL) = (idem_route IS NULL))
);

-- Idempotency-Key is scoped to the caller and the route.
CREATE UNIQUE INDEX requests_idempotency ON requests (user_id, idem_route, idem_key)
    WHERE idem_key IS NOT NULL;

-- The reconciler only ever looks at requests that are not terminal yet.
CREATE INDEX requests_open ON requests (accepted_at)
    WHERE status IN ('queued', 'processing');

-- Fencing tokens (K2): the highest lease token that has applied a change to a
-- key. An apply transaction with a lower token is refused.
CREATE TABLE key_fences (
    key   text PRIMARY KEY,
    token bigint NOT NULL
);

-- +goose Down
DROP TABLE key_fences;
DROP TABLE requests;
