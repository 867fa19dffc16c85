-- +goose Up
-- How far each key's drain has read its mailbox before applying what it
-- read: the highest seq in the window it read. A queued request whose seq a
-- key of its own has reached reads as processing (SPEC §2).
-- Marking a batch is then one row's upsert instead of an update of every
-- request in it, which in a rush was the costliest statement after the
-- seat grants: each request row was written three times (accepted,
-- processing, terminal) and is now written twice.
CREATE TABLE key_progress (
    key         text   PRIMARY KEY,
    through_seq bigint NOT NULL
);

-- +goose Down
DROP TABLE key_progress;
