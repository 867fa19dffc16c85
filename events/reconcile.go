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
	if err := c.pool.QueryRow(ctx, `SELECT total_seats - seats_taken FROM events WHERE id = $1`, ev).Scan(&n); err != nil {
		return 0, err
	}
	return n, c.Set(ctx, ev, n)
}

// Set sets the event's copy to n, the remaining seats a committed
// transaction left (TakeSeats).
func (c *Counts) Set(ctx context.Context, ev int64, n int64) error {
	return c.rdb.Set(ctx, remainingKey(ev), n, 0).Err()
}

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
