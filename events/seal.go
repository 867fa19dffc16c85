package events

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/storage"
)

// Sealer opens admissions of an event with a pre-queue once its sale has
// started and every entry accepted before the start has been applied, so
// the order is complete before anyone is admitted by it.
//
// Membership of the pre-queue is decided by when an entry was accepted
// (before salesStartAt, by Postgres' clock, which stamps accepted_at as the
// API stores it), and an entry is applied a moment after it was accepted;
// an entry accepted just before the start may still be in its mailbox when
// the start comes. Sealing waits sealGrace past the start by the same clock
// (for inserts still committing) and then until no such entry is open in
// Postgres: every entry whose 202
// reached its client before the start is then in the room, at its place in
// the draw. An entry the seal could not see (its insert committed later
// still) is placed by its seq when it is applied, behind the drawn
// pre-queue (RoomWrites.enter): once sealed, nobody's place moves back.
//
// Sealing is safe to try from anywhere and at once: one UPDATE decides,
// and the room's settings in Redis only ever move to newer versions.
type Sealer struct {
	pool *pgxpool.Pool
	room *Room

	mu     sync.Mutex
	failed map[int64]time.Time // event → this process's last try that could not seal it
}

// sealRetry spaces one process's tries for an event after one that could not
// seal it: while entries accepted before the start are still being applied,
// or before the start, polls would otherwise each try.
const sealRetry = 200 * time.Millisecond

// sealGrace is how long after salesStartAt sealing waits at the least.
const sealGrace = time.Second

// NewSealer returns a Sealer.
func NewSealer(pool *pgxpool.Pool, room *Room) *Sealer {
	return &Sealer{pool: pool, room: room, failed: map[int64]time.Time{}}
}

// Seal seals ev's pre-queue if its time has come; sealed reports whether it
// is sealed now. An event without a pre-queue is never sealed (it needs
// no seal). Whether its time has come is decided by Postgres' clock alone.
func (s *Sealer) Seal(ctx context.Context, ev int64) (sealed bool, err error) {
	// Open requests are found through requests_open_by_completion.
	e, err := scanEvent(s.pool.QueryRow(ctx, `UPDATE events e
		SET prequeue_sealed_at = now(), settings_version = settings_version + 1
		WHERE id = $1 AND prequeue_sealed_at IS NULL AND sales_start_at <= now() - $4::interval
		  AND NOT EXISTS (SELECT 1 FROM requests r
		      WHERE r.completed_at IS NULL AND r.accepted_at < e.sales_start_at
		        AND r.type = $2 AND r.keys = ARRAY[$3])
		RETURNING `+eventColumns, ev, TypeQueueEnter, QueueKey(ev), sealGrace))
	if errors.Is(err, pgx.ErrNoRows) {
		// Not sealed now: too early, entries still open, or sealed before
		// (by another process, whose UPDATE this one waited for), in which
		// case Redis may not hold the sealed settings yet, or hold ones
		// from before the seal (a room rebuilt from a cached copy): put the
		// sealed ones there.
		if e, err = scanEvent(s.pool.QueryRow(ctx, `SELECT `+eventColumns+` FROM events WHERE id = $1`, ev)); err != nil {
			return false, storage.Translate("events: seal", err)
		}
		if e.sealedAt == nil {
			return false, nil
		}
	}
	if err != nil {
		return false, storage.Translate("events: seal", err)
	}
	return true, s.room.Configure(ctx, e)
}

// TrySeal seals e's pre-queue if its time has come (Seal), and reports
// whether it is sealed now. A caller whose answer waits for the seal (a
// status of reason prequeue) calls it, and reads again if it sealed: so the
// read that seals answers with the place drawn, as every read after it does.
//
// Tries are spaced sealRetry apart in this process only after one that
// could not seal: callers that come while a try is under way try as well,
// and one whose UPDATE waits for another's seal finds it sealed. Were they
// turned away instead, they would answer from before a seal that a moment
// later is done. now is this process's clock, for that spacing only.
func (s *Sealer) TrySeal(ctx context.Context, e Event, now time.Time) (sealed bool, err error) {
	if e.SalesStartAt == nil {
		return false, nil
	}
	s.mu.Lock()
	last, failed := s.failed[e.EventID]
	s.mu.Unlock()
	if failed && now.Sub(last) < sealRetry {
		return false, nil
	}
	sealed, err = s.Seal(ctx, e.EventID)
	if errors.Is(err, domain.ErrNotFound) {
		return false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sealed {
		delete(s.failed, e.EventID)
		return true, err
	}
	s.failed[e.EventID] = now
	for ev, t := range s.failed { // bounded by events sealing at once
		if now.Sub(t) > time.Minute {
			delete(s.failed, ev)
		}
	}
	return false, err
}
