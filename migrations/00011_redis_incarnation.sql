-- +goose Up
-- Whether Redis has had an incarnation (keyed's renew): a drain that finds
-- Redis without one, while this row says it had one, knows Redis lost its
-- state, and marks every open request undispatched before anything is
-- applied (K3). Without the row it is Redis' first start, or the first
-- since holdfast kept incarnations, and nothing was lost. One row at most.
CREATE TABLE redis_incarnation (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    id  text    NOT NULL
);

-- +goose Down
DROP TABLE redis_incarnation;
