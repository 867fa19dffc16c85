-- +goose Up
-- The open-request index is keyed on completion instead of status, for two
-- reasons. The worker's batch statements find their requests by id and
-- filter on status: when that filter matched this index's predicate, a
-- planner without statistics read every open request for each batch (all
-- of an intake burst's). And an update that changes only status and
-- started_at (queued → processing) now touches no indexed column, so it
-- can be a heap-only update, which the free space left on each page
-- (fillfactor) makes likely.
--
-- In one transaction this holds an exclusive lock on requests while it
-- checks every row and builds the index. On a large table, do both first,
-- without blocking writes, and this migration finds them done:
--   CREATE INDEX CONCURRENTLY requests_open_by_completion ON requests (accepted_at)
--       WHERE completed_at IS NULL;
--   ALTER TABLE requests ADD CONSTRAINT requests_open_until_completed
--       CHECK ((completed_at IS NULL) = (status IN ('queued', 'processing'))) NOT VALID;
--   ALTER TABLE requests VALIDATE CONSTRAINT requests_open_until_completed;
CREATE INDEX IF NOT EXISTS requests_open_by_completion ON requests (accepted_at) WHERE completed_at IS NULL;
DROP INDEX IF EXISTS requests_open;
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conrelid = 'requests'::regclass AND conname = 'requests_open_until_completed') THEN
        ALTER TABLE requests ADD CONSTRAINT requests_open_until_completed
            CHECK ((completed_at IS NULL) = (status IN ('queued', 'processing')));
    END IF;
END $$;
-- +goose StatementEnd
ALTER TABLE requests SET (fillfactor = 80);

-- +goose Down
ALTER TABLE requests RESET (fillfactor);
ALTER TABLE requests DROP CONSTRAINT requests_open_until_completed;
CREATE INDEX requests_open ON requests (accepted_at) WHERE status IN ('queued', 'processing');
DROP INDEX requests_open_by_completion;
