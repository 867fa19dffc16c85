package requests

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/storage"
)

// ErrIdempotencyKeyReused is returned when an Idempotency-Key is replayed
// with a different body.
var ErrIdempotencyKeyReused = domain.NewProblem(domain.CodeIdempotencyKeyReused,
	"this Idempotency-Key was already used with a different request body")

// Store is the Postgres table of requests.
//
// An open request (not terminal yet) is written two ways, which a
// constraint keeps equal (migrations/00007): statements that scan for open
// requests say completed_at IS NULL, the predicate of the index they read;
// those that find requests by id say status IN ('queued', 'processing'),
// so that the planner does not read that index for them.
type Store struct {
	pool  *pgxpool.Pool
	marks *storage.GroupRead[uuid.UUID, struct{}] // markUndispatched's, together
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store {
	s := &Store{pool: pool}
	s.marks = storage.NewGroupRead(s.markUndispatched, maxBatch, storeTimeout)
	return s
}

// columns are what scan reads, in its order.
const columns = `id, seq, type, queue, user_id, keys, payload, trace_id, status, result, error, accepted_at, completed_at`

// viewColumns are columns as a client sees the request: one still queued
// reads as processing once a drain of one of its keys has read it at the
// head of the key's mailbox (MarkProcessing marks the whole window it read,
// as far as its highest seq). A request whose dispatch failed is not in its
// mailboxes and stays queued until it is back. Rows of requests marked
// before key_progress existed say processing themselves.
const viewColumns = `id, seq, type, queue, user_id, keys, payload, trace_id,
	CASE WHEN status = 'queued' AND NOT undispatched AND EXISTS (
		SELECT 1 FROM key_progress p WHERE p.key = ANY (requests.keys) AND p.through_seq >= requests.seq)
	THEN 'processing' ELSE status END,
	result, error, accepted_at, completed_at`

func scan(row pgx.Row, extra ...any) (*Request, error) {
	var r Request
	var errJSON []byte
	if err := row.Scan(append([]any{&r.ID, &r.Seq, &r.Type, &r.Queue, &r.UserID, &r.Keys, &r.Payload, &r.TraceID,
		&r.Status, &r.Result, &errJSON, &r.AcceptedAt, &r.CompletedAt}, extra...)...); err != nil {
		return nil, err
	}
	if len(errJSON) > 0 {
		r.Problem = new(domain.Problem)
		if err := json.Unmarshal(errJSON, r.Problem); err != nil {
			return nil, fmt.Errorf("decode stored error: %w", err)
		}
	}
	return &r, nil
}

// bodyHash fingerprints what makes two submissions "the same request".
func bodyHash(s *Submission) []byte {
	h := sha256.New()
	h.Write([]byte(s.Type))
	h.Write([]byte{0})
	if s.Fingerprint != nil {
		h.Write(s.Fingerprint)
	} else {
		h.Write(s.Payload)
	}
	return h.Sum(nil)
}

// queryRequests runs a query of columns (or viewColumns) and scans its rows.
func queryRequests(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, op, sql string, args ...any) ([]*Request, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, storage.Translate(op, err)
	}
	rs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*Request, error) { return scan(row) })
	return rs, storage.Translate(op, err)
}

// Get returns one request.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (*Request, error) {
	r, err := scan(s.pool.QueryRow(ctx, `SELECT `+viewColumns+` FROM requests WHERE id = $1`, id))
	return r, storage.Translate("requests: get", err)
}

// Settle fixes the fate of requests ids, each of whose client (users, in
// order) was told it may or may not be stored (Unsettled): each that is not
// stored by now gets a tombstone, a terminal request that was never a
// write (TypeNotStored), which Get reads as failed NOT_STORED, no worker ever
// sees, and retention deletes with the other terminal requests. The id is
// the primary key: a late INSERT of the write finds it taken.
func (s *Store) Settle(ctx context.Context, ids []uuid.UUID, users []string) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO requests (id, type, queue, user_id, keys, payload, status, error, accepted_at, completed_at)
		SELECT t.id, $3, '', t.u, '{""}', 'null', 'failed', $4::jsonb, now(), now() FROM unnest($1::uuid[], $2::text[]) AS t(id, u)
		ON CONFLICT (id) DO NOTHING`, ids, users, TypeNotStored, notStored)
	return storage.Translate("requests: settle", err)
}

// TypeNotStored is a tombstone's type.
const TypeNotStored = "not_stored"

// notStored is a tombstone's outcome.
var notStored = domain.NewProblem(domain.CodeNotStored, "this write was not stored; send it again")

// MarkProcessing records that each key's drain has read its mailbox as far
// as the seq through maps it to, and is about to apply what it can of it:
// those still queued read as processing (viewColumns) until they are
// completed, those left waiting for keys another drain holds included.
// One row per key, whatever the batch's size; a mark only ever moves
// forward.
func (s *Store) MarkProcessing(ctx context.Context, through map[string]int64) error {
	if len(through) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(through)) // one order for every writer of these rows
	seqs := make([]int64, len(keys))
	for i, k := range keys {
		seqs[i] = through[k]
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO key_progress (key, through_seq)
		SELECT * FROM unnest($1::text[], $2::bigint[])
		ON CONFLICT (key) DO UPDATE SET through_seq = EXCLUDED.through_seq
		WHERE key_progress.through_seq < EXCLUDED.through_seq`, keys, seqs)
	return storage.Translate("requests: mark processing", err)
}

// LockOpen locks, in seq order, those of ids that are not terminal yet
// and returns them. Terminal ones are left out: this is what makes applying a
// request twice impossible.
func LockOpen(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) ([]*Request, error) {
	return queryRequests(ctx, tx, "requests: lock open", `SELECT `+columns+` FROM requests
		WHERE id = ANY($1) AND status IN ('queued', 'processing') ORDER BY seq FOR UPDATE`, ids)
}

// Complete records the outcomes of reqs (same order) in tx, and sets each
// request to what Postgres stored, so that once tx commits reqs read as Get
// reads them (DoneMessage announces them so).
func Complete(ctx context.Context, tx pgx.Tx, reqs []*Request, outs []Outcome, now time.Time) error {
	if len(reqs) != len(outs) {
		return fmt.Errorf("requests: %d outcomes for %d requests", len(outs), len(reqs))
	}
	ids := make([]uuid.UUID, len(reqs))
	statuses := make([]string, len(reqs))
	results := make([][]byte, len(reqs))
	problems := make([][]byte, len(reqs))
	for i, o := range outs {
		if !o.Status.Terminal() {
			return fmt.Errorf("requests: outcome %d has non-terminal status %q", i, o.Status)
		}
		ids[i], statuses[i] = reqs[i].ID, string(o.Status)
		var err error
		if o.Result != nil {
			if results[i], err = json.Marshal(o.Result); err != nil {
				return fmt.Errorf("requests: encode result: %w", err)
			}
		}
		if o.Problem != nil {
			if problems[i], err = json.Marshal(o.Problem); err != nil {
				return fmt.Errorf("requests: encode error: %w", err)
			}
		}
	}
	stored, err := queryRequests(ctx, tx, "requests: complete", `UPDATE requests r
		SET status = u.st, result = u.res, error = u.err,
			completed_at = $5, started_at = coalesce(r.started_at, $5), undispatched = false
		FROM unnest($1::uuid[], $2::text[], $3::jsonb[], $4::jsonb[]) AS u(uid, st, res, err)
		WHERE r.id = u.uid
		RETURNING `+columns, ids, statuses, results, problems, now)
	if err != nil {
		return err
	}
	if len(stored) != len(reqs) {
		return fmt.Errorf("requests: complete stored %d of %d requests", len(stored), len(reqs))
	}
	byID := make(map[uuid.UUID]*Request, len(stored))
	for _, r := range stored {
		byID[r.ID] = r
	}
	for _, r := range reqs {
		*r = *byID[r.ID]
	}
	return nil
}

// markUndispatched records that requests ids are durable but not in their
// mailboxes. Intake marks through marks (Get): the marks of concurrent
// callers go together, in one UPDATE and one commit, so that while Redis is
// away every write of a rush is marked at the pace of the group commit that
// stored it (make redis-away).
func (s *Store) markUndispatched(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]struct{}, error) {
	_, err := s.pool.Exec(ctx, `UPDATE requests SET undispatched = true
		WHERE id = ANY($1) AND status IN ('queued', 'processing')`, ids)
	return nil, storage.Translate("requests: mark undispatched", err)
}

// MarkOpenUndispatched marks every open request undispatched: Redis lost
// its state, and they may be missing from their mailboxes (keyed's renew).
func (s *Store) MarkOpenUndispatched(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `UPDATE requests SET undispatched = true
		WHERE completed_at IS NULL AND NOT undispatched`)
	return storage.Translate("requests: mark open undispatched", err)
}

// Undispatched lists open requests whose dispatch failed, on any of keys (all
// keys when nil), in seq order after afterSeq. They keep their mark until they
// reach a terminal state (Complete clears it), so that a drain which read its
// mailbox before the reconciler restored one of them still sees it and does
// not overtake it.
func (s *Store) Undispatched(ctx context.Context, keys []string, afterSeq int64, limit int) ([]*Request, error) {
	return queryRequests(ctx, s.pool, "requests: undispatched", `SELECT `+columns+` FROM requests
		WHERE undispatched AND seq > $1 AND status IN ('queued', 'processing') AND ($3::text[] IS NULL OR keys && $3)
		ORDER BY seq LIMIT $2`, afterSeq, limit, keys)
}

// UndispatchedBefore reports whether an open request other than the
// batch's own is marked undispatched on a key of through with a seq below
// the one through maps that key to (the batch's last request on it): applying the batch would overtake it on that key (K3 is
// per key; one on another key of the batch, or later, is not overtaken).
// In the same statement, which every apply transaction makes after its
// waits for row locks, it reads Postgres' clock: now, the batch's time, the
// clock accepted_at is stamped with, the same for every worker.
func UndispatchedBefore(ctx context.Context, tx pgx.Tx, through map[string]int64, batch []uuid.UUID) (found bool, now time.Time, err error) {
	keys, seqs := make([]string, 0, len(through)), make([]int64, 0, len(through))
	for k, seq := range through {
		keys, seqs = append(keys, k), append(seqs, seq)
	}
	err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM requests r JOIN unnest($1::text[], $2::bigint[]) AS b(key, seq)
		ON b.key = ANY (r.keys) AND r.seq < b.seq
		WHERE r.undispatched AND r.status IN ('queued', 'processing') AND r.id <> ALL($3)), clock_timestamp()`, keys, seqs, batch).Scan(&found, &now)
	return found, now.UTC(), storage.Translate("requests: undispatched before", err)
}

// OldestOpenAge is how long the oldest non-terminal request has waited, by
// Postgres' clock (zero when none is open). It reads one entry of the
// requests_open_by_completion partial index, so it is cheap enough for
// every scrape.
func (s *Store) OldestOpenAge(ctx context.Context) (time.Duration, error) {
	var secs float64
	err := s.pool.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM now() - min(accepted_at)), 0)::float8
		FROM requests WHERE completed_at IS NULL`).Scan(&secs)
	if err != nil {
		return 0, storage.Translate("requests: oldest open", err)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// OpenKey is a serialization key that has requests waiting.
type OpenKey struct {
	Key    string
	Queue  string
	Count  int64 // open requests accepted before the cutoff
	MinSeq int64 // the lowest seq among them
	MaxSeq int64 // the highest
}

// OpenKeys lists keys with non-terminal requests accepted more than age
// ago by Postgres' clock (the one accepted_at is stamped with), in the order
// of their oldest request, after the key after (the last of the page before;
// the zero OpenKey for the first). Paging by key rather than by count, a key
// that completes between two pages moves no other key onto the page already
// read.
func (s *Store) OpenKeys(ctx context.Context, age time.Duration, after OpenKey, limit int) ([]OpenKey, error) {
	rows, err := s.pool.Query(ctx, `SELECT k, min(queue), count(*), min(seq), max(seq) FROM requests, unnest(keys) AS k
		WHERE completed_at IS NULL AND accepted_at < now() - $1::interval
		GROUP BY k HAVING (min(seq), k) > ($2, $3) ORDER BY min(seq), k LIMIT $4`, age, after.MinSeq, after.Key, limit)
	if err != nil {
		return nil, storage.Translate("requests: open keys", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[OpenKey])
}

// OpenOnKey lists up to limit non-terminal requests that carry key, with
// seq above after, in seq order.
func (s *Store) OpenOnKey(ctx context.Context, key string, after int64, limit int) ([]*Request, error) {
	return queryRequests(ctx, s.pool, "requests: open on key", `SELECT `+columns+` FROM requests
		WHERE completed_at IS NULL AND keys @> ARRAY[$1::text] AND seq > $2
		ORDER BY seq LIMIT $3`, key, after, limit)
}

// Retention (SPEC §7, docs/configuration.md): a terminal request is kept
// for the retention period after its acceptance and completion, then
// deleted, so the requests table is bounded by rate × retention. Its outcome
// can be read, and its Idempotency-Key replayed, until then; a replay after
// it is a new request. Open requests are never deleted, whatever their age.
// Holds, reservations, orders and seats are other tables: business records,
// never deleted by this.

// DeleteBatch is how many requests one retention statement deletes at the
// most: a short transaction that holds its row locks for milliseconds and
// never blocks intake, which only inserts.
const DeleteBatch = 1000

// DeleteExpired deletes the terminal requests accepted and completed more
// than keep ago by Postgres' clock (the one both are stamped with), batch at
// a time, walking the table in seq order from its oldest row. accepted_at
// rises with seq but for the wait for an INSERT, so it stops at the first
// batch that reaches a request accepted at or after the cutoff (one behind
// it waits for a later pass). It returns how many it deleted. An open
// request on the way is stepped over, never deleted.
func (s *Store) DeleteExpired(ctx context.Context, keep time.Duration, batch int) (int64, error) {
	var total int64
	after := int64(0)
	for {
		var deleted, scanned int64
		var last *int64
		var reachedCutoff *bool
		err := s.pool.QueryRow(ctx, `WITH head AS (
				SELECT id, seq, accepted_at, completed_at, now() - $2::interval AS cutoff FROM requests WHERE seq > $1 ORDER BY seq LIMIT $3
			), gone AS (
				DELETE FROM requests r USING head h
				WHERE r.id = h.id AND h.completed_at < h.cutoff AND h.accepted_at < h.cutoff
				RETURNING 1
			)
			SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM head), (SELECT max(seq) FROM head),
				(SELECT bool_or(accepted_at >= cutoff) FROM head)`, after, keep, batch).
			Scan(&deleted, &scanned, &last, &reachedCutoff)
		if err != nil {
			return total, storage.Translate("requests: delete expired", err)
		}
		total += deleted
		if scanned < int64(batch) || last == nil || (reachedCutoff != nil && *reachedCutoff) {
			return total, nil
		}
		after = *last
	}
}
