package requests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/storage"
)

// groupCommit makes concurrent submissions durable together: one INSERT
// and one commit for every submission waiting at that moment, instead of one
// each, and then puts the whole batch in its mailboxes in one round trip.
// There is no background goroutine: the submissions take turns
// (storage.Turns), one batch's INSERT in flight at a time, and while it
// commits the next batch gathers, so the rate is up to maxBatch per commit,
// and every commit saved is Postgres time saved. A batch's post overlaps the
// next batch's INSERT.
//
// One INSERT in flight, measured in the FCFS rush of make bench on two
// cores: four flushes in flight averaged 4.5 submissions per INSERT and one
// averaged 17, for 3,900 against 4,900 202s per second and a p99 of 82
// against 71 ms. A leader runs one batch and hands on, as the other users of
// storage.Turns do; letting it run up to three in a row made no difference
// beyond the noise (A/B pairs, docs/benchmarks.md, six pairs each, 2026-11-26: fcfs-rush
// 2,639 against 2,664 a second, cart-rush 1,840 against 1,839).
//
// Its gain, measured in pairs with it bypassed (A/B pairs, docs/benchmarks.md, fcfs-rush of
// 40,000 users on two cores, 2026-11-26): 6,023 and 6,156 accepted writes a
// second against 3,771 and 4,624, and 0.267 and 0.234 ms of CPU a journey
// against 0.483 and 0.385 (Postgres alone 0.058 and 0.054 against 0.174 and
// 0.142). GROUP_COMMIT=false (Intake.CommitEach) stores each write in a
// transaction of its own.
type groupCommit struct {
	store   *Store
	post    func(context.Context, []*Request) ([]Posting, error) // Intake.postBatch
	timeout time.Duration                                        // bound on a batch's INSERT, and on its post
	turns   storage.Turns[*pending]
	// posted closes when the last batch is posted; the next batch posts
	// after it, so mailboxes receive batches in seq order. Only the
	// leader of a batch reads and sets it.
	posted <-chan struct{}
}

// maxBatch bounds the submissions of one INSERT.
const maxBatch = 256

// postWithin bounds a batch's post, one Redis round trip. Past it, each
// caller posts its own (or marks it undispatched at its deadline), so the
// writes in flight when Redis froze wait this long, not their whole
// DEPENDENCY_TIMEOUT: make redis-away, with a p99 of about 2 s before.
const postWithin = 500 * time.Millisecond

type pending struct {
	sub     *Submission
	id      uuid.UUID
	state   atomic.Int32 // waiting, taken, stored or gaveUp: who may read the rest
	r       *Request
	created bool // r was stored for sub; false: r is the earlier request of sub's Idempotency-Key
	err     error
	posted  bool          // r is in its mailboxes
	posting Posting       // Post's answer for r, when posted
	done    chan struct{} // closes once its batch's post is over
}

// A pending's state. Its caller waits until its batch is over or its
// deadline passes, whichever comes first; a caller that gives up while its
// submission waits (never sent: the batch leaves it out) or is being stored
// (fate unknown: Unsettled) reads nothing more of it, and one that gives
// up once it is stored reads r, created and err but not what the post sets.
const (
	waiting int32 = iota
	taken
	stored
	gaveUp
)

// errGroupCommit answers the submissions of a batch whose INSERT panicked.
var errGroupCommit = errors.New("requests: group commit failed")

// insert stores sub with the others waiting, and posts it when it can,
// within ctx. It returns whether the post put p in its mailboxes, and what
// it saw there; when ctx ends first, it returns why, unless p is stored
// (then p.r, p.created and p.err tell, and p is not posted as far as the
// caller knows). The caller posts what is not posted yet. A batch whose
// callers all gave up is not started.
func (g *groupCommit) insert(ctx context.Context, p *pending) (posted bool, posting Posting, err error) {
	go g.turns.Take(p, func(batch []*pending) { g.flush(context.WithoutCancel(ctx), batch) })
	select {
	case <-p.done:
		return p.posted, p.posting, nil
	case <-ctx.Done():
	}
	switch {
	case p.state.CompareAndSwap(waiting, gaveUp):
		return false, Posting{}, fmt.Errorf("%w: %w", errNotSent, ctx.Err())
	case p.state.CompareAndSwap(taken, gaveUp):
		return false, Posting{}, &Unsettled{ID: p.id, Err: ctx.Err()}
	}
	return false, Posting{}, nil
}

// flush stores batch. Then, while the next batch is already being stored,
// it posts what it stored; each one's done closes when that is over. A
// Redis round trip thus never holds up the next INSERT. Should the INSERT
// panic, done closes with every submission not stored failed, and the
// panic goes on.
func (g *groupCommit) flush(ctx context.Context, batch []*pending) {
	batch = slices.DeleteFunc(batch, func(p *pending) bool { return !p.state.CompareAndSwap(waiting, taken) })
	if len(batch) == 0 { // every caller gave up
		return
	}
	defer func() {
		if r := recover(); r != nil {
			for _, p := range batch {
				if p.r == nil && p.err == nil { // one stored already is posted by its caller
					p.err = errGroupCommit
				}
			}
			closeAll(batch)
			panic(r)
		}
	}()
	g.store.storeBatch(ctx, batch, g.timeout)
	post := slices.DeleteFunc(slices.Clone(batch), func(p *pending) bool {
		p.state.CompareAndSwap(taken, stored) // its caller may read r, created and err now
		// One whose caller gave up is posted all the same: the holder of
		// one of its keys, or the reconciler, applies it.
		return !p.created
	})
	prev := g.posted
	g.posted = batch[0].done // each one's closes at once
	ctx, cancel := context.WithTimeout(ctx, min(g.timeout, postWithin))
	go func() {
		defer closeAll(batch)
		defer cancel()
		if prev != nil {
			<-prev
		}
		g.postAll(ctx, post)
	}()
}

// closeAll closes each one's done in batch.
func closeAll(batch []*pending) {
	for _, p := range batch {
		close(p.done)
	}
}

// postAll puts batch's requests in their mailboxes in one round trip. On
// failure, a panic included, nothing counts as posted: each caller posts its
// own, and posting twice is harmless.
func (g *groupCommit) postAll(ctx context.Context, batch []*pending) {
	if len(batch) == 0 {
		return
	}
	defer func() {
		if recover() != nil {
			for _, p := range batch {
				p.posted = false
			}
		}
	}()
	rs := make([]*Request, len(batch))
	for i, p := range batch {
		rs[i] = p.r
	}
	postings, err := g.post(ctx, rs)
	if err != nil {
		return
	}
	for i, p := range batch {
		p.posted, p.posting = true, postings[i]
	}
}

// storeBatch stores batch in one INSERT, bounded by timeout, and sets each
// one's r, with created, or its err. A submission whose Idempotency-Key was
// used before gets the earlier request instead (replay). An INSERT that
// failed once sent may have committed although its answer was lost, or may
// yet commit (Postgres goes on with a statement until it hears of a dropped
// connection, and a frozen server runs it when it wakes): settle decides.
func (s *Store) storeBatch(ctx context.Context, batch []*pending, timeout time.Duration) {
	ictx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stored, err := s.insertMany(ictx, batch)
	for try := 0; try < 2 && storage.RolledBack(err); try++ {
		// Another API's batch took some of the same Idempotency-Keys in
		// another order, and Postgres broke the deadlock by rolling this
		// statement back: none of it is stored, and its keys' rows may be
		// there now, to be replayed.
		stored, err = s.insertMany(ictx, batch)
	}
	insertErr := err
	if err != nil && !errors.Is(err, errNotSent) {
		stored, err = s.settle(ctx, batch, timeout)
	}
	var replays []*pending
	for _, p := range batch {
		switch st, ok := stored[p.id]; {
		case ok:
			p.r, p.created = newRequest(p.sub, p.id, st.at, st.seq), true
		case insertErr == nil && p.sub.IdempotencyKey != "": // its key's row was there (insertMany)
			replays = append(replays, p)
		case insertErr == nil: // a tombstone stands under its id: its caller gave up, and a read settled it
			p.err = errTombstoned
		case err != nil:
			p.err = &Unsettled{ID: p.id, Err: err}
		default: // never sent, or a tombstone stands in its place
			p.err = insertErr
		}
	}
	if len(replays) > 0 {
		s.replay(ictx, replays)
	}
}

// Unsettled is a write whose INSERT may or may not have committed, as
// Postgres answered neither it nor settle in time (frozen, say). Its client
// is told so, with the id: a read of the request settles it (Store.Settle),
// and finds its outcome or that it was not stored.
type Unsettled struct {
	ID  uuid.UUID
	Err error
}

func (u *Unsettled) Error() string { return "requests: not known whether stored: " + u.Err.Error() }
func (u *Unsettled) Unwrap() error { return u.Err }

// settle makes the fate of batch's ids certain after an INSERT of unknown
// outcome, and returns the stamps of those stored. Each id gets a
// tombstone unless stored (Settle): of the tombstone and the write
// whichever comes first stands, whenever the other arrives, so a write
// answered as not stored is never applied afterwards.
func (s *Store) settle(ctx context.Context, batch []*pending, timeout time.Duration) (map[uuid.UUID]stamp, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	ids, users := make([]uuid.UUID, len(batch)), make([]string, len(batch))
	for i, p := range batch {
		ids[i], users[i] = p.id, p.sub.UserID
	}
	if err := s.Settle(ctx, ids, users); err != nil {
		return nil, err
	}
	return stampsByID(s.pool.Query(ctx, `SELECT id, seq, accepted_at FROM requests WHERE id = ANY($1) AND type <> $2`, ids, TypeNotStored))
}

// idemKey is what an Idempotency-Key is unique within: its user and route.
type idemKey struct{ user, route, key string }

// replay answers the submissions whose Idempotency-Key their user used on
// the same route before: each gets that request as Get reads it, or
// ErrIdempotencyKeyReused when its body differs.
func (s *Store) replay(ctx context.Context, batch []*pending) {
	n := len(batch)
	users, routes, keys := make([]string, n), make([]string, n), make([]string, n)
	for i, p := range batch {
		users[i], routes[i], keys[i] = p.sub.UserID, p.sub.Route, p.sub.IdempotencyKey
	}
	type earlier struct {
		r    *Request
		hash []byte
	}
	found := map[idemKey]earlier{}
	rows, err := s.pool.Query(ctx, `WITH asked AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))
		SELECT `+viewColumns+`, body_hash, idem_route, idem_key FROM requests
		WHERE idem_key IS NOT NULL AND (user_id, idem_route, idem_key) IN (SELECT * FROM asked)`, users, routes, keys)
	if err == nil {
		_, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (struct{}, error) {
			var e earlier
			var route, key string
			r, err := scan(row, &e.hash, &route, &key)
			if err == nil {
				e.r = r
				found[idemKey{r.UserID, route, key}] = e
			}
			return struct{}{}, err
		})
	}
	for _, p := range batch {
		e, ok := found[idemKey{p.sub.UserID, p.sub.Route, p.sub.IdempotencyKey}]
		switch {
		case err != nil:
			p.err = storage.Translate("requests: replay", err)
		case !ok: // deleted by retention meanwhile
			p.err = fmt.Errorf("requests: replay: the request of this Idempotency-Key just expired: %w", domain.ErrConflict)
		case !bytes.Equal(e.hash, bodyHash(p.sub)):
			p.err = ErrIdempotencyKeyReused
		default:
			r := *e.r
			p.r = &r
		}
	}
}

// stamp is where a stored request stands: its seq and when it was accepted.
type stamp struct {
	seq int64
	at  time.Time
}

// stampsByID reads rows of (id, seq, accepted_at).
func stampsByID(rows pgx.Rows, err error) (map[uuid.UUID]stamp, error) {
	if err != nil {
		return nil, err
	}
	out := map[uuid.UUID]stamp{}
	var id uuid.UUID
	var st stamp
	_, err = pgx.ForEachRow(rows, []any{&id, &st.seq, &st.at}, func() error { st.at = st.at.UTC(); out[id] = st; return nil })
	return out, err
}

// newRequest is sub as stored under id and seq at now.
func newRequest(sub *Submission, id uuid.UUID, now time.Time, seq int64) *Request {
	return &Request{ID: id, Seq: seq, Type: sub.Type, Queue: sub.Queue, UserID: sub.UserID, Keys: sub.Keys,
		Payload: sub.Payload, TraceID: sub.TraceID, Status: domain.StatusQueued, AcceptedAt: now}
}

// insertMany stores the submissions of batch in one statement, seq
// following the batch's order, and returns the seqs and acceptance times of
// those stored: all but those whose Idempotency-Key their user used on the
// same route before, in an earlier statement or earlier in this one, and
// those whose id a tombstone holds (errTombstoned). The
// acceptance time is Postgres' clock (now()), never the API's: every time
// compared with it (the reconciler's and the seal's cutoffs, a batch's
// time, retention) is Postgres' clock too, so no two processes' clocks
// are ever compared.
func (s *Store) insertMany(ctx context.Context, batch []*pending) (map[uuid.UUID]stamp, error) {
	n := len(batch)
	ids := make([]uuid.UUID, n)
	types, queues, users, traces := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	keys, payloads, routes, idems := make([]string, n), make([]string, n), make([]*string, n), make([]*string, n)
	hashes := make([][]byte, n)
	for i, p := range batch {
		k, err := json.Marshal(p.sub.Keys)
		if err != nil {
			return nil, fmt.Errorf("requests: encode keys: %w", err)
		}
		ids[i], types[i], queues[i], users[i], traces[i] = p.id, p.sub.Type, p.sub.Queue, p.sub.UserID, p.sub.TraceID
		keys[i], payloads[i] = string(k), string(p.sub.Payload)
		if p.sub.IdempotencyKey != "" {
			routes[i], idems[i], hashes[i] = &p.sub.Route, &p.sub.IdempotencyKey, bodyHash(p.sub)
		}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNotSent, storage.Translate("requests: insert batch", err))
	}
	defer conn.Release()
	seqs, err := stampsByID(conn.Query(ctx, `
		INSERT INTO requests (id, type, queue, user_id, keys, payload, trace_id, accepted_at, idem_route, idem_key, body_hash)
		SELECT u.id, u.type, u.queue, u.user_id, ARRAY(SELECT jsonb_array_elements_text(u.keys)), u.payload, u.trace_id, now(),
			u.route, u.idem, u.hash
		FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::jsonb[], $7::text[],
			$8::text[], $9::text[], $10::bytea[])
			WITH ORDINALITY AS u(id, type, queue, user_id, keys, payload, trace_id, route, idem, hash, ord)
		ORDER BY u.ord
		ON CONFLICT DO NOTHING
		RETURNING id, seq, accepted_at`, ids, types, queues, users, keys, payloads, traces, routes, idems, hashes))
	return seqs, storage.Translate("requests: insert batch", err)
}

// errNotSent marks an INSERT that never reached Postgres.
var errNotSent = errors.New("requests: not sent")

// errTombstoned is the fate of a write whose id a tombstone took before its
// INSERT ran (Settle): not stored, and never to be. Only a read of the id
// of a caller that gave up (Unsettled) puts one there first, so no one
// waits for this answer. The INSERT leaves that row out (ON CONFLICT DO
// NOTHING), not the rest of its batch.
var errTombstoned = fmt.Errorf("%w: a tombstone took its id first: %w", errNotSent, context.DeadlineExceeded)
