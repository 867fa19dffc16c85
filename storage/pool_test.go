package storage_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/storage"
)

// holdConns acquires n connections of pool at once and returns them.
func holdConns(t *testing.T, pool *pgxpool.Pool, n int) []*pgxpool.Conn {
	t.Helper()
	conns := make([]*pgxpool.Conn, n)
	for i := range conns {
		c, err := pool.Acquire(context.Background())
		require.NoError(t, err)
		conns[i] = c
	}
	return conns
}

// A pool with IdleTimeout gives back connections its load no longer uses;
// the control, pgx's defaults, keeps them (30 minutes).
func TestIdleConnectionsAreClosed(t *testing.T) {
	t.Parallel()
	url, _ := testenv.Postgres(t)
	ctx := context.Background()
	idle, err := storage.OpenPostgres(ctx, url, 4, storage.IdleTimeout(time.Second))
	require.NoError(t, err)
	defer idle.Close()
	control, err := storage.OpenPostgres(ctx, url, 4)
	require.NoError(t, err)
	defer control.Close()
	for _, pool := range []*pgxpool.Pool{idle, control} {
		for _, conn := range holdConns(t, pool, 4) {
			conn.Release()
		}
		require.EqualValues(t, 4, pool.Stat().TotalConns())
	}
	// Idle 1 s, checked every 1 s; the control has had as long once they go.
	require.Eventually(t, func() bool { return idle.Stat().TotalConns() == 0 }, 10*time.Second, 50*time.Millisecond,
		"idle connections were kept")
	require.EqualValues(t, 4, control.Stat().TotalConns(), "the control closed its connections")
}

// syncBuffer is a log destination tests read while the watcher writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WatchPool says when callers waited for a connection because all of the
// pool's were in use, or gave up; a pool that only grew to meet its load
// (the control) is not reported.
func TestWatchPoolReportsExhaustion(t *testing.T) {
	t.Parallel()
	url, _ := testenv.Postgres(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := func(pool *pgxpool.Pool) *syncBuffer {
		var out syncBuffer
		go storage.WatchPool(ctx, pool, "test", 50*time.Millisecond, slog.New(slog.NewTextHandler(&out, nil)))
		// Its first look, the one later looks count from: nothing observable
		// says the goroutine has taken it.
		time.Sleep(100 * time.Millisecond)
		return &out
	}

	grown, err := storage.OpenPostgres(ctx, url, 3)
	require.NoError(t, err)
	defer grown.Close()
	grownLog := watch(grown)
	for _, c := range holdConns(t, grown, 3) {
		c.Release()
	}

	full, err := storage.OpenPostgres(ctx, url, 2)
	require.NoError(t, err)
	defer full.Close()
	fullLog := watch(full)
	held := holdConns(t, full, 2)
	actx, acancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = full.Acquire(actx) // gives up: both are held
	acancel()
	require.Error(t, err)
	for _, c := range held {
		c.Release()
	}

	require.Eventually(t, func() bool { return strings.Contains(fullLog.String(), "postgres pool exhausted") }, 5*time.Second, 20*time.Millisecond)
	require.Contains(t, fullLog.String(), "gaveUp=1")
	// Several more looks at the grown pool: a report that does not come is
	// an absence, and nothing says the watcher looked and kept quiet.
	time.Sleep(200 * time.Millisecond)
	require.NotContains(t, grownLog.String(), "exhausted", "a pool that only grew was reported")
}
