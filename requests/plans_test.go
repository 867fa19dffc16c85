package requests

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/storage"
)

// planLog collects the plans Postgres' auto_explain reports for every
// statement of a pool's single connection, as JSON with actual row counts.
type planLog struct {
	mu    sync.Mutex
	plans map[string][]int // statement's first three words → rows examined, per run
}

func (l *planLog) option(c *pgxpool.Config) {
	c.MaxConns = 1
	for k, v := range map[string]string{
		"session_preload_libraries": "auto_explain", "auto_explain.log_min_duration": "0",
		"auto_explain.log_analyze": "on", "auto_explain.log_format": "json", "client_min_messages": "log",
	} {
		c.ConnConfig.RuntimeParams[k] = v
	}
	c.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		_, doc, ok := strings.Cut(n.Message, "plan:\n")
		if !ok {
			return
		}
		var p struct {
			Query string           `json:"Query Text"`
			Plan  testenv.PlanNode `json:"Plan"`
		}
		if json.Unmarshal([]byte(doc), &p) != nil {
			return
		}
		name := strings.Join(strings.Fields(p.Query)[:3], " ")
		l.mu.Lock()
		l.plans[name] = append(l.plans[name], p.Plan.Examined())
		l.mu.Unlock()
	}
}

// last is the rows examined by the latest statement starting with prefix.
func (l *planLog) last(t *testing.T, prefix string) int {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	runs := l.plans[prefix]
	require.NotEmpty(t, runs, "no plan logged for %q (have %v)", prefix, l.plans)
	return runs[len(runs)-1]
}

// The worker's per-batch statements (mark the key's progress, lock the open
// requests, record outcomes) must touch about as many rows as the batch
// has, however many requests are stored and open: during an intake burst
// tens of thousands are. Planned as the worker plans them (custom plans,
// storage.CustomPlans), a batch of 100 among 50,000 open requests examines
// at most 3 rows per request. So must intake's INSERT, and its read of the
// requests that Idempotency-Keys replay.
//
// The control adds back an index whose predicate is on status, as the open
// index was before: locking a batch's open requests then reads every open
// request.
func TestBatchStatementsDoNotGrowWithTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const stored, batch = 50000, 100
	const bound = 3 * batch

	run := func(t *testing.T, schema string) *planLog {
		url, admin := testenv.Postgres(t) // a table of its own
		if schema != "" {
			_, err := admin.Exec(ctx, schema)
			require.NoError(t, err)
		}
		log := &planLog{plans: map[string][]int{}}
		pool, err := storage.OpenPostgres(ctx, url, 1, storage.CustomPlans, log.option)
		require.NoError(t, err)
		defer pool.Close()
		store := NewStore(pool)
		applyBatch := func(ids []uuid.UUID, lastSeq int64) {
			now := time.Now().UTC()
			require.NoError(t, store.MarkProcessing(ctx, map[string]int64{"k": lastSeq}))
			require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				open, err := LockOpen(ctx, tx, ids)
				require.NoError(t, err)
				require.Len(t, open, len(ids))
				outs := make([]Outcome, len(open))
				for i := range outs {
					outs[i] = Succeeded(map[string]int{"n": i})
				}
				return Complete(ctx, tx, open, outs, now)
			}))
		}
		// The first batches of a rush, while the table is small, then a
		// full table.
		for range 8 {
			applyBatch(insertOpen(t, pool, batch))
		}
		insertOpen(t, pool, stored)
		applyBatch(insertOpen(t, pool, batch))
		// Writes with Idempotency-Keys, then each again: the replays.
		idem := make([]*pending, batch)
		for i := range idem {
			idem[i] = &pending{id: uuid.New(), sub: &Submission{Type: "t", Queue: "q", UserID: "u",
				Keys: []string{"k"}, Payload: json.RawMessage(`{}`), Route: "POST /t", IdempotencyKey: uuid.NewString()}}
		}
		store.storeBatch(ctx, idem, time.Minute)
		for _, p := range idem {
			require.True(t, p.created)
			p.id, p.r, p.created = uuid.New(), nil, false
		}
		store.storeBatch(ctx, idem, time.Minute)
		for _, p := range idem {
			require.NoError(t, p.err)
			require.False(t, p.created)
		}
		return log
	}

	plans := run(t, "")
	for _, stmt := range []string{"INSERT INTO key_progress", "SELECT id, seq,", "UPDATE requests r", "INSERT INTO requests", "WITH asked AS"} {
		require.LessOrEqual(t, plans.last(t, stmt), bound, stmt)
	}

	control := run(t, `CREATE INDEX requests_status_open ON requests (accepted_at) WHERE status IN ('queued', 'processing')`)
	require.Greater(t, control.last(t, "SELECT id, seq,"), 10*bound, "open requests locked with a status-keyed open index")
}

// insertOpen stores n queued requests on key "k" and returns their ids and
// the last one's seq.
func insertOpen(t *testing.T, pool *pgxpool.Pool, n int) ([]uuid.UUID, int64) {
	t.Helper()
	batch := make([]*pending, n)
	ids := make([]uuid.UUID, n)
	for i := range batch {
		id, err := uuid.NewV7()
		require.NoError(t, err)
		ids[i] = id
		batch[i] = &pending{id: id, sub: &Submission{
			Type: "t", Queue: "q", UserID: "u", Keys: []string{"k"}, Payload: json.RawMessage(`{}`)}}
	}
	seqs, err := NewStore(pool).insertMany(context.Background(), batch)
	require.NoError(t, err)
	return ids, seqs[ids[n-1]].seq
}
