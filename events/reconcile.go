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
// seat:count) and exports the per-event gauges. Postgres is the truth: a
// batch that takes seats lowers the copy by as many once it has committed
// (Take), and Reconcile sets it from a count, so a lost or corrupted copy
// heals on its own. Take does not count: counting reads every free seat of
// the event, which after every batch of a rush cost more Postgres time than
// the batch itself. A Reconcile pass that counts before a batch commits and
// sets the copy after the batch lowered it leaves the copy that batch too
// high until the next pass (EVENTS_RECONCILE_INTERVAL); the count clients
// see is for display, and no seat is granted from it.
type Counts struct {
	pool *pgxpool.Pool
	rdb  redis.UniversalClient

	RemainingGauge, Queued, Active *prometheus.GaugeVec
}

// NewCounts returns Counts with its gauges (register them once).
func NewCounts(pool *pgxpool.Pool, rdb redis.UniversalClient) *Counts {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"event"})
	}
	return &Counts{pool: pool, rdb: rdb,
		RemainingGauge: gauge("holdfast_event_remaining_seats", "Seats not yet reserved, per event."),
		Queued:         gauge("holdfast_event_queue_length", "Users waiting in the event's waiting room."),
		Active:         gauge("holdfast_event_active_tokens", "Valid entry tokens, per event.")}
}

// Collectors are the gauges, for the worker's registry.
func (c *Counts) Collectors() []prometheus.Collector {
	return []prometheus.Collector{c.RemainingGauge, c.Queued, c.Active}
}

// Recount sets the event's remaining-seat copy from Postgres.
func (c *Counts) Recount(ctx context.Context, ev int64) (int64, error) {
	var n int64
	if err := c.pool.QueryRow(ctx, `SELECT count(*) FROM seats WHERE event_id = $1 AND NOT reserved`, ev).Scan(&n); err != nil {
		return 0, err
	}
	return n, c.rdb.Set(ctx, remainingKey(ev), n, 0).Err()
}

// takeScript lowers a remaining-seat copy by ARGV[1] if there is one; a
// missing copy is left for a recount, since lowering it would invent one.
var takeScript = redis.NewScript(`if redis.call('EXISTS', KEYS[1]) == 1 then
	return redis.call('DECRBY', KEYS[1], ARGV[1])
end
return false`)

// Take lowers the event's copy by n seats just reserved (in a committed
// transaction), or recounts it when there is no copy yet.
func (c *Counts) Take(ctx context.Context, ev int64, n int) error {
	err := takeScript.Run(ctx, c.rdb, []string{remainingKey(ev)}, n).Err()
	if errors.Is(err, redis.Nil) {
		_, err = c.Recount(ctx, ev)
	}
	return err
}

// Remaining reads the copy, recounting it if it is missing. A damaged copy
// below zero reads as 0 until Reconcile repairs it: no client is ever shown
// a negative number of seats.
func (c *Counts) Remaining(ctx context.Context, ev int64) (int64, error) {
	n, err := c.rdb.Get(ctx, remainingKey(ev)).Int64()
	if errors.Is(err, redis.Nil) {
		return c.Recount(ctx, ev)
	}
	return max(n, 0), err
}

// Reconcile repairs every recent event's remaining-seat copy, trims expired
// entry tokens and exports the gauges. Each step sets a value derived from
// Postgres or removes what has expired, so two replicas may run it at once.
func (c *Counts) Reconcile(ctx context.Context, now time.Time) error {
	rows, err := c.pool.Query(ctx, `SELECT id FROM events ORDER BY id DESC LIMIT $1`, reconcileEvents)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	for _, ev := range ids {
		n, err := c.Recount(ctx, ev)
		if err != nil {
			return err
		}
		pipe := c.rdb.Pipeline()
		pipe.ZRemRangeByScore(ctx, roomKey(ev, "tokens"), "-inf", strconv.FormatInt(now.UnixMilli(), 10))
		active := pipe.ZCard(ctx, roomKey(ev, "tokens"))
		queued := pipe.ZCard(ctx, roomKey(ev, "queue"))
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		label := strconv.FormatInt(ev, 10)
		c.RemainingGauge.WithLabelValues(label).Set(float64(n))
		c.Active.WithLabelValues(label).Set(float64(active.Val()))
		c.Queued.WithLabelValues(label).Set(float64(queued.Val()))
	}
	return nil
}
