package storage_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/storage"
)

// Migrators queue per schema: four processes migrating one new schema at
// once all succeed and apply each migration once, while a migrator of
// another schema does not wait for them. Shown with schema a's migration
// lock held: b migrates, a's migrator waits on the lock until it is let go.
func TestMigratorsQueuePerSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	server := testenv.PGServerURL()
	open := func(url string) *pgxpool.Pool {
		pool, err := storage.OpenPostgres(ctx, url, 2)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool
	}
	schema := func(url string) string {
		_, rest, _ := strings.Cut(url, "search_path=")
		name, _, _ := strings.Cut(rest, "%2C")
		return name
	}

	a, b := testenv.EmptySchemaOn(t, server), testenv.EmptySchemaOn(t, server)
	holder := open(a)
	conn, err := holder.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SELECT pg_advisory_lock($1, hashtext($2))`, int32(storage.MigrationLock), schema(a))
	require.NoError(t, err)

	require.NoError(t, storage.Migrate(ctx, open(b)), "another schema's lock held: b migrates")
	done := make(chan []error, 1)
	go func() {
		done <- testenv.AtOnce(4, func(int) error { return storage.Migrate(ctx, open(a)) })
	}()
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, holder.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
			AND classid = $1 AND objid::int = hashtext($2) AND NOT granted`, int32(storage.MigrationLock), schema(a)).Scan(&waiting))
		return waiting == 4
	}, time.Minute, 10*time.Millisecond, "a's migrators wait on its lock")
	_, err = conn.Exec(ctx, `SELECT pg_advisory_unlock($1, hashtext($2))`, int32(storage.MigrationLock), schema(a))
	require.NoError(t, err)
	for _, err := range <-done {
		require.NoError(t, err)
	}
	for _, url := range []string{a, b} {
		var applied, distinct int
		require.NoError(t, holder.QueryRow(ctx, `SELECT count(*), count(DISTINCT version_id)
			FROM `+schema(url)+`.goose_db_version WHERE version_id > 0`).Scan(&applied, &distinct))
		require.Equal(t, distinct, applied, "each migration applied once in %s", schema(url))
		require.Positive(t, applied)
	}
}
