package testenv

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// Statements counts the statements a pool sends Postgres, those of a batch
// one each: the work Postgres parses and runs, whatever the round trips.
type Statements struct{ n atomic.Int64 }

// Count is the statements sent since the last Reset.
func (s *Statements) Count() int64 { return s.n.Load() }

// Reset starts the count again.
func (s *Statements) Reset() { s.n.Store(0) }

// TraceQueryStart counts a statement.
func (s *Statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}

// TraceQueryEnd is part of pgx.QueryTracer.
func (*Statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart is part of pgx.BatchTracer.
func (*Statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery counts a statement of a batch.
func (s *Statements) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) { s.n.Add(1) }

// TraceBatchEnd is part of pgx.BatchTracer.
func (*Statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// CountingPool opens a pool on url (a Postgres URL of the test's) whose
// statements the returned Statements counts; it closes when the test ends.
func CountingPool(t testing.TB, url string) (*pgxpool.Pool, *Statements) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	s := &Statements{}
	cfg.ConnConfig.Tracer = s
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, s
}
