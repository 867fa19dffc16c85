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
// Membership of the pre-queue is decided by when the API accepted an entry
// (before salesStartAt, by the API's clock), and an entry is applied a
// moment after it was accepted; an entry accepted just before the start may
// still be in its mailbox when the start comes. Sealing waits sealGrace
// past the start (for inserts still committing, and clocks a little apart)
// and then until no such entry is open in Postgres: every entry whose 202
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

	mu    sync.Mutex
	tried map[int64]time.Time // event → last try here, to try at most every sealRetry
}

// sealRetry spaces one process's tries for an event: while entries accepted
// before the start are still being applied, polls would otherwise each try.
const sealRetry = 200 * time.Millisecond

// sealGrace is how long after salesStartAt sealing waits at the least.
const sealGrace = time.Second

// NewSealer returns a Sealer.
func NewSealer(pool *pgxpool.Pool, room *Room) *Sealer {
	return &Sealer{pool: pool, room: room, tried: map[int64]time.Time{}}
}

// Seal seals ev's pre-queue if its time has come; sealed reports whether it
// is sealed now. An event without a pre-queue is never sealed (it needs
// no seal).
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
		// Not sealed now: too early, entries still open, or sealed before,
		// in which case Redis may hold settings from before the seal (a
		// room rebuilt from a cached copy): put the sealed ones back.
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

// TrySeal seals e's pre-queue if its sale has started, trying at most every
// sealRetry in this process. The room's admissions stay closed until it is
// sealed; a caller that saw them closed after the start calls this.
func (s *Sealer) TrySeal(ctx context.Context, e Event, now time.Time) error {
	if e.SalesStartAt == nil || now.Before(e.SalesStartAt.Add(sealGrace)) {
		return nil
	}
	s.mu.Lock()
	last, ok := s.tried[e.EventID]
	due := !ok || now.Sub(last) >= sealRetry
	if due {
		s.tried[e.EventID] = now
		for ev, t := range s.tried { // bounded by events sealing at once
			if now.Sub(t) > time.Minute {
				delete(s.tried, ev)
			}
		}
	}
	s.mu.Unlock()
	if !due {
		return nil
	}
	if _, err := s.Seal(ctx, e.EventID); err != nil && !errors.Is(err, domain.ErrNotFound) {
		return err
	}
	return nil
}
