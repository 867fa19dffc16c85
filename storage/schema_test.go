package storage_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/storage"
)

// With MIGRATE_ON_START=false (storage.RequireSchema) a process migrates
// nothing: on an unmigrated database, or one that lacks a migration of its
// build, it refuses to start and says what to run; on a schema a newer
// release migrated it starts (the expand/contract rule of storage.Schema).
// The control: the same process with MIGRATE_ON_START=true migrates the
// empty database and starts.
func TestAProcessThatDoesNotMigrateNeedsItsSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	redisURL, _ := testenv.Redis(t)
	open := func(url string, schema storage.Schema) error {
		st, err := storage.Open(ctx, url, config.Redis{URL: redisURL}, 2, schema)
		if err == nil {
			st.Close()
		}
		return err
	}
	versions, err := storage.Versions()
	require.NoError(t, err)
	latest := versions[len(versions)-1]

	url := testenv.EmptySchemaOn(t, testenv.PGServerURL())
	err = open(url, storage.RequireSchema)
	require.ErrorContains(t, err, "run `api migrate`", "an unmigrated database")
	pool, err := storage.OpenPostgres(ctx, url, 2)
	require.NoError(t, err)
	defer pool.Close()
	st, err := storage.ReadSchema(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, versions, st.Pending, "it created nothing: every migration is still pending")

	require.NoError(t, open(url, storage.MigrateSchema), "the control: a migrating process starts")
	require.NoError(t, open(url, storage.RequireSchema), "migrated, it starts")

	// A newer release's migration applied: this build starts beside it.
	_, err = pool.Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, latest+1)
	require.NoError(t, err)
	require.NoError(t, open(url, storage.RequireSchema), "a newer schema")
	require.NoError(t, open(url, storage.MigrateSchema), "a newer schema, migrating")
	st, err = storage.ReadSchema(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, storage.SchemaState{Newer: []int64{latest + 1}}, st)

	// One of its own migrations missing: it names it.
	_, err = pool.Exec(ctx, `DELETE FROM goose_db_version WHERE version_id = $1`, latest)
	require.NoError(t, err)
	err = open(url, storage.RequireSchema)
	require.ErrorContains(t, err, fmt.Sprintf("lacks migrations [%d]", latest))
}
