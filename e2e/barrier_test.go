package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/systest"
)

// barrier holds table exclusively so that every transaction reading it
// waits; release lets them all go at once. Races start their workers behind
// it so that concurrent batches really overlap, guarded or not.
type barrier struct {
	t     *testing.T
	s     *systest.System
	table string
	tx    pgx.Tx
}

func holdTable(t *testing.T, s *systest.System, table string) *barrier {
	tx, err := s.Pool.Begin(context.Background())
	require.NoError(t, err)
	_, err = tx.Exec(context.Background(), `LOCK TABLE `+pgx.Identifier{table}.Sanitize()+` IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	b := &barrier{t: t, s: s, table: table, tx: tx}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // never leave the workers blocked
	return b
}

// release waits until at least waiters transactions queue on the table,
// gives others a moment to join them, and lets them all through.
func (b *barrier) release(waiters int) {
	require.Eventually(b.t, func() bool {
		var waiting int
		_ = b.s.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
			WHERE relation = to_regclass($1) AND NOT granted`, b.table).Scan(&waiting)
		return waiting >= waiters
	}, 30*time.Second, 10*time.Millisecond)
	// Others may still be on their way, and nothing says how many: waiters
	// is the least the caller needs, not all there will be.
	time.Sleep(300 * time.Millisecond)
	require.NoError(b.t, b.tx.Commit(context.Background()))
}

func redisZ(at time.Time, member string) redis.Z {
	return redis.Z{Score: float64(at.UnixMilli()), Member: member}
}
