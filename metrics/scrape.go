package metrics

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// scrapeTimeout bounds the query a collector makes at scrape time, so a slow
// Postgres or Redis delays /metrics by at most this much.
const scrapeTimeout = time.Second

// RedisMemory exports Redis' own memory figures at scrape time, so the
// "Redis near its memory limit" alert needs no separate exporter: the queue,
// mailboxes and leases live in Redis with `maxmemory-policy noeviction`, and a
// full Redis refuses every write (deploy/redis.conf). On Redis Cluster each
// master is reported under its address. A failed INFO leaves the series out
// of that scrape rather than failing the whole /metrics answer.
type RedisMemory struct {
	rdb         redis.UniversalClient
	used, limit *prometheus.Desc
}

// NewRedisMemory returns the collector; register it in one binary.
func NewRedisMemory(rdb redis.UniversalClient) *RedisMemory {
	return &RedisMemory{rdb: rdb,
		used: prometheus.NewDesc("holdfast_redis_used_memory_bytes",
			"Redis INFO memory used_memory, read at scrape time.", []string{"node"}, nil),
		limit: prometheus.NewDesc("holdfast_redis_maxmemory_bytes",
			"Redis maxmemory (0: no limit), read at scrape time.", []string{"node"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (r *RedisMemory) Describe(ch chan<- *prometheus.Desc) { ch <- r.used; ch <- r.limit }

// Collect implements prometheus.Collector.
func (r *RedisMemory) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	emit := func(c *redis.Client) {
		info, err := c.InfoMap(ctx, "memory").Result()
		if err != nil {
			return
		}
		used, uerr := strconv.ParseFloat(info["Memory"]["used_memory"], 64)
		limit, lerr := strconv.ParseFloat(info["Memory"]["maxmemory"], 64)
		if uerr != nil || lerr != nil {
			return
		}
		node := c.Options().Addr
		if node == "FailoverClient" { // go-redis' name for a Sentinel-managed primary
			node = "sentinel"
		}
		ch <- prometheus.MustNewConstMetric(r.used, prometheus.GaugeValue, used, node)
		ch <- prometheus.MustNewConstMetric(r.limit, prometheus.GaugeValue, limit, node)
	}
	switch c := r.rdb.(type) {
	case *redis.Client:
		emit(c)
	case *redis.ClusterClient:
		var mu sync.Mutex // ForEachMaster calls back concurrently
		_ = c.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			emit(m)
			return nil
		})
	}
}

// OldestOpenSource reports how long the oldest non-terminal request has
// waited (zero when there is none).
type OldestOpenSource interface {
	OldestOpenAge(ctx context.Context) (time.Duration, error)
}

// OldestOpen exports the age of the oldest accepted request that is not yet
// terminal, read from Postgres at scrape time. It is the signal that a
// request is stuck: every accepted request must reach a terminal state, and
// its age keeps growing until it does, whether or not any worker is alive to
// export anything. A failed query leaves the series out of that scrape.
type OldestOpen struct {
	src  OldestOpenSource
	desc *prometheus.Desc
}

// NewOldestOpen returns the collector; register it in one binary.
func NewOldestOpen(src OldestOpenSource) *OldestOpen {
	return &OldestOpen{src: src, desc: prometheus.NewDesc("holdfast_requests_oldest_open_seconds",
		"Age of the oldest accepted request that is still queued or processing (0: none), read at scrape time.", nil, nil)}
}

// Describe implements prometheus.Collector.
func (o *OldestOpen) Describe(ch chan<- *prometheus.Desc) { ch <- o.desc }

// Collect implements prometheus.Collector.
func (o *OldestOpen) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	age, err := o.src.OldestOpenAge(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(o.desc, prometheus.GaugeValue, age.Seconds())
}
