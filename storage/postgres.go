package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	pgxuuid "github.com/vgarvardt/pgx-google-uuid/v5"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/migrations"
)

// PGOption adjusts a pool's configuration before it connects.
type PGOption func(*pgxpool.Config)

// CustomPlans has Postgres plan each statement for its parameters and the
// tables' current sizes (plan_cache_mode = force_custom_plan), instead of
// reusing a generic plan made once per connection. The worker's statements
// run once per batch, so planning is cheap next to them, while the tables
// they read grow from empty to many thousands of rows during a rush: a
// plan cached at the start (a sequential scan of a then tiny requests
// table) is what made recording a batch's outcomes slower with every batch.
func CustomPlans(c *pgxpool.Config) {
	c.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
}

// OpenPostgres connects a pool and checks the connection.
func OpenPostgres(ctx context.Context, url string, maxConns int32, opts ...PGOption) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("storage: parse DATABASE_URL: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	for _, o := range opts {
		o(cfg)
	}
	// Request ids are google/uuid values; without this codec pgx encodes
	// each through its text form and an error it builds and drops.
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		pgxuuid.Register(c.TypeMap())
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("storage: open postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("storage: ping postgres: %w", err)
	}
	return pool, nil
}

// migrationLock is the advisory lock class that serializes migrators; the
// lock is the schema the pool's search_path selects, so that the
// migrators of one schema queue and those of others (parallel tests) do
// not.
const migrationLock = 0x686f6c64 // "hold"

// Migrate applies every pending migration. Concurrent callers (the API and
// the worker starting together) queue on a Postgres advisory lock of the
// schema, held by one pooled connection; the pool needs at least two.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("storage: migration lock: %w", err)
	}
	const lock, unlock = `SELECT pg_advisory_lock($1, hashtext(current_schema()))`, `SELECT pg_advisory_unlock($1, hashtext(current_schema()))`
	if _, err := conn.Exec(ctx, lock, int32(migrationLock)); err != nil {
		conn.Release()
		return fmt.Errorf("storage: migration lock: %w", err)
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), unlock, int32(migrationLock)); err != nil {
			// It may still hold the lock: closed, not pooled, it lets go.
			_ = conn.Hijack().Close(context.WithoutCancel(ctx))
			return
		}
		conn.Release()
	}()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		return fmt.Errorf("storage: migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("storage: migrate: %w", err)
	}
	return nil
}

// EnsureDatabase creates the database named in url if it does not exist, by
// connecting to the server's `postgres` database. `make run` uses it.
func EnsureDatabase(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("storage: parse DATABASE_URL: %w", err)
	}
	// A database that exists is left alone without a look at the server's
	// `postgres` database, which a managed Postgres may not let this role
	// open.
	if conn, err := pgx.ConnectConfig(ctx, cfg.Copy()); err == nil {
		return conn.Close(ctx)
	}
	name := cfg.Database
	cfg.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("storage: connect to create database: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("storage: look up database: %w", err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505") { // created concurrently
		return nil
	}
	if err != nil {
		return fmt.Errorf("storage: create database %s: %w", name, err)
	}
	return nil
}

// Translate maps driver errors to domain errors: no rows → ErrNotFound,
// unique and exclusion violations → ErrConflict. Other errors pass through
// wrapped with op.
func Translate(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", op, domain.ErrNotFound)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505", "23P01":
			return fmt.Errorf("%s: %s: %w", op, strings.TrimSpace(pgErr.ConstraintName), domain.ErrConflict)
		case "23503": // the referenced row does not exist
			return fmt.Errorf("%s: %s: %w", op, strings.TrimSpace(pgErr.ConstraintName), domain.ErrNotFound)
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}
