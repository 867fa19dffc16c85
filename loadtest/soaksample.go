package loadtest

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// SoakSample is what the soak scenario read at one moment. A part that
// could not be read is absent, and Errors says why.
type SoakSample struct {
	// Seconds since the first write (the baseline is a little before it).
	Seconds float64 `json:"seconds"`
	Phase   string  `json:"phase"`
	// Keys is the number of distinct serialization keys written so far.
	Keys int `json:"keys"`
	// RSSMiB and HeapMiB are each process's process_resident_memory_bytes
	// and go_memstats_heap_inuse_bytes, by name ("api", "worker").
	RSSMiB  map[string]float64 `json:"rssMiB,omitempty"`
	HeapMiB map[string]float64 `json:"heapInuseMiB,omitempty"`
	// Redis is INFO memory's used_memory and DBSIZE.
	Redis *RedisSample `json:"redis,omitempty"`
	// Tables are the soakTables that exist, by name.
	Tables map[string]TableSample `json:"tables,omitempty"`
	Errors []string               `json:"errors,omitempty"`
}

// RedisSample is Redis' memory and key count.
type RedisSample struct {
	UsedMemoryMiB float64 `json:"usedMemoryMiB"`
	Keys          int64   `json:"keys"`
}

// TableSample is one table's pg_total_relation_size (table, indexes and
// TOAST) and its row count.
type TableSample struct {
	MiB  float64 `json:"mib"`
	Rows int64   `json:"rows"`
}

// soakTables are the tables that grow with requests and keys. One that
// does not exist (a schema without it) is left out of the samples.
var soakTables = []string{"requests", "key_fences", "key_progress"}

// soakProcesses are the processes whose memory is sampled, when their
// /metrics is known.
var soakProcesses = []string{"api", "worker"}

const (
	metricRSS  = "process_resident_memory_bytes"
	metricHeap = "go_memstats_heap_inuse_bytes"
)

// soakSampler reads the samples: each process's /metrics, Redis and
// Postgres, each only when its address was given. The rows are counted
// exactly (count(*)): an estimate lags behind autovacuum, and the
// retention check must see the rows there are.
type soakSampler struct {
	hc      *http.Client
	metrics map[string]string
	rdb     *redis.Client // nil: not sampled
	mu      sync.Mutex    // one sample at a time on db
	db      *pgx.Conn     // nil: not sampled
}

func newSoakSampler(ctx context.Context, metrics map[string]string, redisURL, databaseURL string) (*soakSampler, error) {
	s := &soakSampler{hc: &http.Client{Timeout: 5 * time.Second}, metrics: metrics}
	if redisURL != "" {
		opt, err := redis.ParseURL(redisURL)
		if err != nil {
			return nil, fmt.Errorf("soak: -redis: %w", err)
		}
		s.rdb = redis.NewClient(opt)
	}
	if databaseURL != "" {
		db, err := pgx.Connect(ctx, databaseURL)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("soak: -database-url: %w", err)
		}
		s.db = db
	}
	return s, nil
}

func (s *soakSampler) close() {
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
	if s.db != nil {
		_ = s.db.Close(context.Background())
	}
}

// take reads one sample.
func (s *soakSampler) take(ctx context.Context, phase string, keys int) SoakSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	smp := SoakSample{Phase: phase, Keys: keys, RSSMiB: map[string]float64{}, HeapMiB: map[string]float64{}}
	fail := func(part string, err error) { smp.Errors = append(smp.Errors, part+": "+err.Error()) }
	for _, name := range soakProcesses {
		url, ok := s.metrics[name]
		if !ok {
			continue
		}
		vs, err := scrapeValues(ctx, s.hc, url, metricRSS, metricHeap)
		if err != nil {
			fail(name, err)
		}
		if v, ok := vs[metricRSS]; ok {
			smp.RSSMiB[name] = round(v/(1<<20), 1)
		}
		if v, ok := vs[metricHeap]; ok {
			smp.HeapMiB[name] = round(v/(1<<20), 1)
		}
	}
	if s.rdb != nil {
		if r, err := s.redis(ctx); err != nil {
			fail("redis", err)
		} else {
			smp.Redis = r
		}
	}
	if s.db != nil {
		tables, err := s.tables(ctx)
		if err != nil {
			fail("postgres", err)
		}
		if len(tables) > 0 {
			smp.Tables = tables
		}
	}
	return smp
}

func (s *soakSampler) redis(ctx context.Context) (*RedisSample, error) {
	info, err := s.rdb.InfoMap(ctx, "memory").Result()
	if err != nil {
		return nil, err
	}
	used, err := strconv.ParseFloat(info["Memory"]["used_memory"], 64)
	if err != nil {
		return nil, fmt.Errorf("INFO memory used_memory: %w", err)
	}
	n, err := s.rdb.DBSize(ctx).Result()
	if err != nil {
		return nil, err
	}
	return &RedisSample{UsedMemoryMiB: round(used/(1<<20), 2), Keys: n}, nil
}

// tables reads the size and rows of each of soakTables that exists.
func (s *soakSampler) tables(ctx context.Context) (map[string]TableSample, error) {
	out := map[string]TableSample{}
	for _, name := range soakTables {
		var size *int64
		if err := s.db.QueryRow(ctx, `SELECT pg_total_relation_size(to_regclass($1))`, name).Scan(&size); err != nil {
			return out, fmt.Errorf("size of %s: %w", name, err)
		}
		if size == nil {
			continue
		}
		var rows int64
		if err := s.db.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{name}.Sanitize()).Scan(&rows); err != nil {
			return out, fmt.Errorf("rows of %s: %w", name, err)
		}
		out[name] = TableSample{MiB: round(float64(*size)/(1<<20), 2), Rows: rows}
	}
	return out, nil
}

// tableNames are the tables present in any of samples, in soakTables order.
func tableNames(samples []SoakSample) []string {
	seen := map[string]bool{}
	for _, s := range samples {
		for k := range maps.Keys(s.Tables) {
			seen[k] = true
		}
	}
	return slices.DeleteFunc(slices.Clone(soakTables), func(t string) bool { return !seen[t] })
}
