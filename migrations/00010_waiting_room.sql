-- +goose Up
-- The waiting room for real crowds (SPEC §6.1): presence and claim window,
-- an optional admission rate and pause switch, a pre-queue between
-- queue_opens_at and sales_start_at whose order comes from a seed committed
-- to at creation, and where the page hands an admitted user over to.
--
-- shuffle_seed is secret until sales_start_at: the public event shows its
-- SHA-256 from creation and the seed itself once the sale has started.
-- Existing events get a seed from two random UUIDs (244 random bits); new
-- events get 32 bytes from Go's crypto/rand.
-- settings_version counts changes to the admission settings, so a stale
-- copy of them can never overwrite a newer one in Redis.
-- prequeue_sealed_at is when every pre-queue entry accepted before the start
-- had been applied: admissions of an event with a pre-queue begin then.
ALTER TABLE events
    ADD COLUMN presence_timeout_seconds integer NOT NULL DEFAULT 60
        CHECK (presence_timeout_seconds BETWEEN 1 AND 86400),
    ADD COLUMN claim_window_seconds integer NOT NULL DEFAULT 60
        CHECK (claim_window_seconds BETWEEN 1 AND 86400),
    ADD COLUMN admit_per_minute integer CHECK (admit_per_minute > 0),
    ADD COLUMN admission_paused boolean NOT NULL DEFAULT false,
    ADD COLUMN queue_opens_at timestamptz,
    ADD COLUMN sales_start_at timestamptz,
    ADD COLUMN return_url text CHECK (length(return_url) <= 2048),
    ADD COLUMN shuffle_seed bytea NOT NULL DEFAULT decode(
        replace(gen_random_uuid()::text, '-', '') || replace(gen_random_uuid()::text, '-', ''), 'hex')
        CHECK (length(shuffle_seed) = 32),
    ADD COLUMN settings_version bigint NOT NULL DEFAULT 1,
    ADD COLUMN prequeue_sealed_at timestamptz,
    ADD CONSTRAINT events_prequeue_order CHECK (queue_opens_at < sales_start_at);

-- The pre-queue's entrants, as pseudonyms, in entry order: the public list a
-- user checks the shuffle against (GET /api/v1/public/events/{id}/prequeue).
-- Bounded by the entrants of each event's pre-queue; kept with the event.
CREATE TABLE prequeue_entries (
    event_id  bigint NOT NULL REFERENCES events,
    pseudonym text   NOT NULL,
    seq       bigint NOT NULL,
    PRIMARY KEY (event_id, pseudonym)
);
CREATE INDEX prequeue_entries_order ON prequeue_entries (event_id, seq);

-- +goose Down
DROP TABLE prequeue_entries;
ALTER TABLE events
    DROP CONSTRAINT events_prequeue_order,
    DROP COLUMN prequeue_sealed_at,
    DROP COLUMN settings_version,
    DROP COLUMN shuffle_seed,
    DROP COLUMN return_url,
    DROP COLUMN sales_start_at,
    DROP COLUMN queue_opens_at,
    DROP COLUMN admission_paused,
    DROP COLUMN admit_per_minute,
    DROP COLUMN claim_window_seconds,
    DROP COLUMN presence_timeout_seconds;
