-- +goose Up
-- The open-request index is keyed on completion instead of status, for two
-- reasons. The worker's batch statements find their requests by id and
-- filter on status: when that filter matched this index's predicate, a
-- planner without statistics read every open request for each batch (all
-- of an intake burst's). And an update that changes only status and
-- started_at (queued → processing) now touches no indexed column, so it
-- can be a heap-only update, which the free space left on each page
-- (fillfactor) makes likely.
ALTER TABLE requests ADD CONSTRAINT requests_open_until_completed
    CHECK ((completed_at IS NULL) = (status IN ('queued', 'processing')));
DROP INDEX requests_open;
CREATE INDEX requests_open ON requests (accepted_at) WHERE completed_at IS NULL;
ALTER TABLE requests SET (fillfactor = 80);

-- +goose Down
ALTER TABLE requests RESET (fillfactor);
DROP INDEX requests_open;
CREATE INDEX requests_open ON requests (accepted_at) WHERE status IN ('queued', 'processing');
ALTER TABLE requests DROP CONSTRAINT requests_open_until_completed;
