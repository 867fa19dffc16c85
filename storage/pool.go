package storage

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// IdleTimeout closes a pooled connection once it has been idle for d (it is
// checked every d/2), so a process keeps only the connections its current
// load uses. Without it pgx keeps idle connections 30 minutes, and an API
// that served one burst held all PG_MAX_CONNS of them while idle, leaving
// other processes none.
func IdleTimeout(d time.Duration) PGOption {
	return func(c *pgxpool.Config) {
		c.MaxConnIdleTime = d
		c.HealthCheckPeriod = max(d/2, time.Second)
	}
}

// poolWatch remembers a pool's counters at the last look.
type poolWatch struct {
	// mark is the highest count yet of acquires that found the pool empty
	// beyond the connections it opened: each of those waited for another
	// caller's connection because all of MaxConns were in use.
	mark     int64
	gaveUp   int64
	waitTime time.Duration
}

// look reports what happened since the last look: acquires that waited for
// another caller's connection, and acquires that gave up waiting (their
// callers got 503 UNAVAILABLE).
func (w *poolWatch) look(st *pgxpool.Stat) (waitedForRelease, gaveUp int64, waitTime time.Duration) {
	// An acquire that finds the pool empty waits either for a new
	// connection or for one to be released; only the second is exhaustion.
	// A new connection is counted before the acquire that waited for it,
	// so the difference may dip between looks; only a new high counts.
	if excess := st.EmptyAcquireCount() - st.NewConnsCount(); excess > w.mark {
		waitedForRelease, w.mark = excess-w.mark, excess
	}
	gaveUp, w.gaveUp = st.CanceledAcquireCount()-w.gaveUp, st.CanceledAcquireCount()
	waitTime, w.waitTime = st.EmptyAcquireWaitTime()-w.waitTime, st.EmptyAcquireWaitTime()
	return waitedForRelease, gaveUp, waitTime
}

// PoolWatchInterval is how often each process looks at its Postgres pool,
// and so the most often it logs that the pool was exhausted.
const PoolWatchInterval = 10 * time.Second

// WatchPool logs a warning, at most once per interval until ctx ends, when
// pool was exhausted in it: callers waited for a connection because all
// PG_MAX_CONNS were in use, or gave up waiting. Either means PG_MAX_CONNS
// (or Postgres' max_connections) is too small for the load.
func WatchPool(ctx context.Context, pool *pgxpool.Pool, name string, interval time.Duration, log *slog.Logger) {
	var w poolWatch
	w.look(pool.Stat())
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := pool.Stat()
		if waited, gaveUp, waitTime := w.look(st); waited > 0 || gaveUp > 0 {
			log.Warn("postgres pool exhausted: raise PG_MAX_CONNS within max_connections (docs/operations.md)",
				"pool", name, "maxConns", st.MaxConns(), "inUse", st.AcquiredConns(),
				"waited", waited, "gaveUp", gaveUp, "waitMs", waitTime.Milliseconds(), "over", interval.String())
		}
	}
}
