package events

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/keyed"
)

// TypeReconcile is the periodic events reconcile task (seed 003's design card).
const TypeReconcile = "events:reconcile"

// reconcileEvents bounds one pass: the most recent events.
const reconcileEvents = 1000

func remainingKey(ev int64) string { return keyed.KeyTag(EventKey(ev)) + ":remaining" }

// Counts keeps the Redis copy of each event's remaining seats (seed 003's
// seat:count) and exports the per-event gauges. Postgres is the truth: every
// transaction that reserves seats counts them in events.seats_taken
// (TakeSeats) and, once committed, sets the copy to what remains; Reconcile
// sets it again from Postgres, so a lost or corrupted copy heals on its own.
// Transactions that take seats of one event are serialized by its key, so
// their copies are set in order.
type Counts struct {
	pool *pgxpool.Pool
	rdb  redis.UniversalClient

	RemainingGauge *prometheus.GaugeVec
}

// NewCounts returns Counts with its gauge (register it once).
func NewCounts(pool *pgxpool.Pool, rdb redis.UniversalClient) *Counts {
	return &Counts{pool: pool, rdb: rdb, RemainingGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "holdfast_event_remaining_seats", Help: "Seats not yet reserved, per event."}, []string{"event"})}
}

// holdsKey is the set of an event's held seat holds: member "id:seats",
// score its expiry (ms). Bounded by the holds still held.
func holdsKey(ev int64) string { return keyed.KeyTag(EventKey(ev)) + ":holds" }

// Recount sets the event's remaining-seat copy and its holds' expiry set
// from Postgres, and returns the seats remaining now.
func (c *Counts) Recount(ctx context.Context, ev int64) (int64, error) {
	// One statement, one snapshot: the count and the holds agree.
	rows, err := c.pool.Query(ctx, `SELECT e.total_seats - e.seats_taken, now(), h.id, h.seat_ids, h.expires_at
		FROM events e LEFT JOIN seat_holds h ON h.event_id = e.id AND h.status = 'HELD' WHERE e.id = $1`, ev)
	if err != nil {
		return 0, err
	}
	var n, expired int64
	var held []*hold
	found := false
	for rows.Next() {
		var now time.Time
		var id *int64
		var expires *time.Time
		x := &hold{}
		if err := rows.Scan(&n, &now, &id, &x.seats, &expires); err != nil {
			rows.Close()
			return 0, err
		}
		found = true
		if id == nil { // no hold held: the left join's one row
			continue
		}
		x.id, x.expires = *id, *expires
		held = append(held, x)
		if !x.expires.After(now) {
			expired += int64(len(x.seats))
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, pgx.ErrNoRows
	}
	_, err = c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, remainingKey(ev), n, 0)
		p.Del(ctx, holdsKey(ev))
		for _, x := range held {
			p.ZAdd(ctx, holdsKey(ev), holdMember(x))
		}
		return nil
	})
	return n + expired, err
}

// Set sets the event's copy to n, the remaining seats a committed
// transaction left (TakeSeats).
func (c *Counts) Set(ctx context.Context, ev int64, n int64) error {
	return c.rdb.Set(ctx, remainingKey(ev), n, 0).Err()
}

func holdMember(x *hold) redis.Z {
	return redis.Z{Member: strconv.FormatInt(x.id, 10) + ":" + strconv.Itoa(len(x.seats)), Score: float64(x.expires.UnixMilli())}
}

// SetHolds sets the event's copy to n, as Set does, and in the same step
// adds the holds a committed batch created to the expiry set and takes out
// those it confirmed, released or expired.
func (c *Counts) SetHolds(ctx context.Context, ev int64, n int64, created, gone []*hold) error {
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, remainingKey(ev), n, 0)
		for _, x := range created {
			p.ZAdd(ctx, holdsKey(ev), holdMember(x))
		}
		for _, x := range gone {
			p.ZRem(ctx, holdsKey(ev), strconv.FormatInt(x.id, 10)+":"+strconv.Itoa(len(x.seats)))
		}
		return nil
	})
	return err
}

// remainingScript reads the copy and adds the seats of holds past their
// expiry at Redis's clock: a hold's seats count as remaining from its
// expiry on, before any sweep frees them. Nil when the copy is missing.
// KEYS: remaining, holds.
var remainingScript = redis.NewScript(`
local n = redis.call('GET', KEYS[1])
if not n then return false end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local back = 0
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do
  back = back + tonumber(string.match(m, ':(%d+)$'))
end
return tonumber(n) + back`)

// TakeSeats counts n seats of event ev as reserved, in the transaction
// that reserves them, and returns how many remain.
func TakeSeats(ctx context.Context, tx pgx.Tx, ev int64, n int) (remaining int64, err error) {
	err = tx.QueryRow(ctx, `UPDATE events SET seats_taken = seats_taken + $2 WHERE id = $1
		RETURNING total_seats - seats_taken`, ev, n).Scan(&remaining)
	return remaining, err
}

// Remaining reads the copy, recounting it if it is missing. A damaged copy
// below zero reads as 0 until Reconcile repairs it: no client is ever shown
// a negative number of seats.
func (c *Counts) Remaining(ctx context.Context, ev int64) (int64, error) {
	n, err := remainingScript.Run(ctx, c.rdb, []string{remainingKey(ev), holdsKey(ev)}).Int64()
	if errors.Is(err, redis.Nil) {
		return c.Recount(ctx, ev)
	}
	return max(n, 0), err
}

// Rooms is the periodic events task (seed 003's design card): for each
// recent event it repairs the remaining-seat copy, puts the waiting room's
// settings back in Redis from Postgres, seals a pre-queue whose time has
// come, takes out of the line whoever has lapsed, and exports the gauges.
// None of it is needed for correct counts (every waiting-room script tidies
// first); it keeps Redis and the dashboards current while a room is quiet.
// Each step sets a value derived from Postgres or removes what has lapsed,
// so two replicas may run it at once.
type Rooms struct {
	pool   *pgxpool.Pool
	room   *Room
	sealer *Sealer
	counts *Counts

	Queue, Active, Admitted *prometheus.GaugeVec
}

// NewRooms returns Rooms with its gauges (register them once).
func NewRooms(pool *pgxpool.Pool, room *Room, sealer *Sealer, counts *Counts) *Rooms {
	return &Rooms{pool: pool, room: room, sealer: sealer, counts: counts,
		Queue: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "holdfast_event_queue_length",
			Help: "Users in the event's waiting room, by status: prequeue, waiting or ready."}, []string{"event", "status"}),
		Active: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "holdfast_event_active_tokens",
			Help: "Valid entry tokens, per event."}, []string{"event"}),
		Admitted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "holdfast_event_admissions_last_minute",
			Help: "Entry tokens issued in the last rolling minute, per event (what admitPerMinute caps)."}, []string{"event"}),
	}
}

// Collectors are the remaining-seat and waiting-room gauges, for the
// worker's registry.
func (r *Rooms) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.counts.RemainingGauge, r.Queue, r.Active, r.Admitted}
}

// Reconcile runs one pass over the most recent events.
func (r *Rooms) Reconcile(ctx context.Context) error {
	rows, err := r.pool.Query(ctx, `SELECT `+eventColumns+` FROM events ORDER BY id DESC LIMIT $1`, reconcileEvents)
	if err != nil {
		return err
	}
	evs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) { return scanEvent(row) })
	if err != nil {
		return err
	}
	for _, e := range evs {
		n, err := r.counts.Recount(ctx, e.EventID)
		if err != nil {
			return err
		}
		label := strconv.FormatInt(e.EventID, 10)
		r.counts.RemainingGauge.WithLabelValues(label).Set(float64(n))
		if err := r.room.Configure(ctx, e); err != nil {
			return err
		}
		if e.soldOut { // the room's offer of released seats, set again from Postgres
			if err := r.room.SetLeft(ctx, e.EventID, n, true); err != nil {
				return err
			}
		}
		if e.SalesStartAt != nil && e.sealedAt == nil { // Seal decides by Postgres' clock whether it is time
			if _, err := r.sealer.Seal(ctx, e.EventID); err != nil {
				return err
			}
		}
		c, err := r.room.Census(ctx, e)
		if err != nil {
			return err
		}
		r.Queue.WithLabelValues(label, "prequeue").Set(float64(c.Prequeue))
		r.Queue.WithLabelValues(label, "waiting").Set(float64(c.Waiting))
		r.Queue.WithLabelValues(label, "ready").Set(float64(c.Ready))
		r.Active.WithLabelValues(label).Set(float64(c.ActiveTokens))
		r.Admitted.WithLabelValues(label).Set(float64(c.AdmittedLastMinute))
	}
	return nil
}

// Remaining is the remaining-seat gauge.
func (r *Rooms) Remaining() *prometheus.GaugeVec { return r.counts.RemainingGauge }
