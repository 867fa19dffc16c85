package storage

import (
	"context"
	"fmt"
	"io/fs"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"

	"github.com/holdfast/holdfast/migrations"
)

// Schema is what a process does with the database schema it finds at
// start (MIGRATE_ON_START).
//
// The rule for a rolling upgrade, when processes of two releases run
// against one schema: a release's migrations only expand (new tables, new
// nullable or defaulted columns, new indexes), so the release before it
// runs unchanged on the migrated schema; what a release no longer uses is
// dropped (contracted) one release later, when nothing of the old one runs.
// So a process starts on a schema newer than itself (Newer is not empty)
// and never on one older: its code needs every migration it knows.
type Schema int

const (
	// MigrateSchema applies the pending migrations first, each process
	// queueing on a lock (one machine, make run, tests).
	MigrateSchema Schema = iota
	// RequireSchema applies none: the process refuses to start while one
	// of its migrations is not applied, naming them. In production the
	// migration Job (`api migrate`) is the only migrator, run before a
	// rollout.
	RequireSchema
)

// SchemaAtStart is the Schema of MIGRATE_ON_START.
func SchemaAtStart(migrate bool) Schema {
	if migrate {
		return MigrateSchema
	}
	return RequireSchema
}

func (s Schema) prepare(ctx context.Context, pool *pgxpool.Pool) error {
	if s == MigrateSchema {
		return Migrate(ctx, pool)
	}
	st, err := ReadSchema(ctx, pool)
	if err != nil {
		return err
	}
	if len(st.Pending) > 0 {
		return fmt.Errorf("storage: the database lacks migrations %v of this build (MIGRATE_ON_START=false): "+
			"run `api migrate` (the migration Job) first", st.Pending)
	}
	return nil
}

// SchemaState compares the migrations applied to a database with this
// build's.
type SchemaState struct {
	Pending []int64 // this build's migrations the database lacks
	Newer   []int64 // applied migrations this build does not know: a newer release's
}

// ReadSchema reads which migrations the database has, without changing it.
func ReadSchema(ctx context.Context, pool *pgxpool.Pool) (SchemaState, error) {
	var table *string
	if err := pool.QueryRow(ctx, `SELECT to_regclass(format('%I.goose_db_version', current_schema()))::text`).Scan(&table); err != nil {
		return SchemaState{}, fmt.Errorf("storage: read schema: %w", err)
	}
	var applied []int64
	if table != nil {
		rows, err := pool.Query(ctx, "SELECT version_id FROM "+*table+" WHERE is_applied AND version_id > 0")
		if err != nil {
			return SchemaState{}, fmt.Errorf("storage: read schema: %w", err)
		}
		for rows.Next() {
			var v int64
			if err := rows.Scan(&v); err != nil {
				return SchemaState{}, fmt.Errorf("storage: read schema: %w", err)
			}
			applied = append(applied, v)
		}
		if err := rows.Err(); err != nil {
			return SchemaState{}, fmt.Errorf("storage: read schema: %w", err)
		}
	}
	known, err := Versions()
	if err != nil {
		return SchemaState{}, err
	}
	var st SchemaState
	for _, v := range known {
		if !slices.Contains(applied, v) {
			st.Pending = append(st.Pending, v)
		}
	}
	for _, v := range applied {
		if !slices.Contains(known, v) {
			st.Newer = append(st.Newer, v)
		}
	}
	slices.Sort(st.Newer)
	return st, nil
}

// Versions lists this build's migrations, oldest first.
func Versions() ([]int64, error) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("storage: migrations: %w", err)
	}
	vs := make([]int64, 0, len(names))
	for _, n := range names {
		v, err := goose.NumericComponent(n)
		if err != nil {
			return nil, fmt.Errorf("storage: migration %s: %w", n, err)
		}
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs, nil
}
