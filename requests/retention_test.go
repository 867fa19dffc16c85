package requests

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
)

// retentionRig stores requests accepted at chosen times.
type retentionRig struct {
	t     *testing.T
	pool  *pgxpool.Pool
	store *Store
}

func newRetentionRig(t *testing.T) *retentionRig {
	_, pool := testenv.Postgres(t)
	return &retentionRig{t: t, pool: pool, store: NewStore(pool)}
}

// insert stores a request and moves its acceptance to at (intake stamps
// Postgres' clock); completed, when not zero, makes it terminal then.
func (r *retentionRig) insert(at, completed time.Time, idemKey string) *Request {
	r.t.Helper()
	req, created, err := storeOne(context.Background(), r.store, &Submission{Type: "t", Queue: "q", UserID: "u",
		Keys: []string{"k"}, Payload: json.RawMessage(`{}`), Route: "POST /t", IdempotencyKey: idemKey}, uuid.New())
	require.NoError(r.t, err)
	require.True(r.t, created)
	_, err = r.pool.Exec(context.Background(), `UPDATE requests SET accepted_at = $2 WHERE id = $1`, req.ID, at)
	require.NoError(r.t, err)
	if !completed.IsZero() {
		_, err := r.pool.Exec(context.Background(), `UPDATE requests SET status = 'succeeded', result = '{}',
			completed_at = $2 WHERE id = $1`, req.ID, completed)
		require.NoError(r.t, err)
	}
	return req
}

func (r *retentionRig) exists(id uuid.UUID) bool {
	r.t.Helper()
	var found bool
	require.NoError(r.t, r.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM requests WHERE id = $1)`, id).Scan(&found))
	return found
}

// Retention deletes the terminal requests accepted and completed before the
// cutoff, a batch at a time past an old open request at the head of the
// table, and nothing else: not an open request however old, not one that
// completed after the cutoff, not a recent one. An Idempotency-Key whose
// request is gone starts a new request.
func TestRetentionDeletesOnlyTerminalRequestsPastIt(t *testing.T) {
	t.Parallel()
	r := newRetentionRig(t)
	ctx := context.Background()
	now := time.Now().UTC()
	const keep = 7 * 24 * time.Hour
	old, recently := now.Add(-10*24*time.Hour), now.Add(-time.Hour)

	stuck := r.insert(old, time.Time{}, "") // open for ten days: the reconciler's, never retention's
	var expired []*Request
	for range 5 {
		expired = append(expired, r.insert(old, old.Add(time.Second), ""))
	}
	replayed := r.insert(old, old.Add(time.Second), "idem-old")
	expired = append(expired, replayed)
	lateDone := r.insert(old, recently, "")
	recent := r.insert(recently, recently.Add(time.Second), "")
	open := r.insert(recently, time.Time{}, "")

	n, err := r.store.DeleteExpired(ctx, keep, 2) // four statements' worth
	require.NoError(t, err)
	require.EqualValues(t, len(expired), n)
	for _, e := range expired {
		require.False(t, r.exists(e.ID), "request %d past retention", e.Seq)
	}
	for _, kept := range []*Request{stuck, lateDone, recent, open} {
		require.True(t, r.exists(kept.ID), "request %d kept", kept.Seq)
	}
	_, err = r.store.Get(ctx, replayed.ID)
	require.Error(t, err, "its outcome is gone")

	again, created, err := storeOne(ctx, r.store, &Submission{Type: "t", Queue: "q", UserID: "u", Keys: []string{"k"},
		Payload: json.RawMessage(`{}`), Route: "POST /t", IdempotencyKey: "idem-old"}, uuid.New())
	require.NoError(t, err)
	require.True(t, created, "after retention a replay is a new request")
	require.NotEqual(t, replayed.ID, again.ID)

	n, err = r.store.DeleteExpired(ctx, keep, 2)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to delete")
}

// Retention runs beside intake without getting in its way: while 3,000 old
// requests are deleted 100 at a time, 200 new ones are stored concurrently,
// and every one of them is there afterwards.
func TestRetentionBesideIntake(t *testing.T) {
	t.Parallel()
	r := newRetentionRig(t)
	ctx := context.Background()
	old := time.Now().Add(-30 * 24 * time.Hour)
	_, err := r.pool.Exec(ctx, `INSERT INTO requests (id, type, queue, user_id, keys, payload, status, result, accepted_at, completed_at)
		SELECT gen_random_uuid(), 't', 'q', 'u' || i, ARRAY['k' || i], '{}', 'succeeded', '{}', $1, $1
		FROM generate_series(1, 3000) AS i`, old)
	require.NoError(t, err)

	var wg sync.WaitGroup
	newIDs := make([]uuid.UUID, 200)
	errs := make([]error, len(newIDs))
	for i := range newIDs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _, err := storeOne(ctx, r.store, &Submission{Type: "t", Queue: "q", UserID: fmt.Sprintf("new%d", i),
				Keys: []string{"k"}, Payload: json.RawMessage(`{}`)}, uuid.New())
			if err == nil {
				newIDs[i] = req.ID
			}
			errs[i] = err
		}()
	}
	n, err := r.store.DeleteExpired(ctx, 7*24*time.Hour, 100)
	wg.Wait()
	require.NoError(t, err)
	require.EqualValues(t, 3000, n)
	for i, id := range newIDs {
		require.NoError(t, errs[i])
		require.True(t, r.exists(id))
	}
	var left int
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT count(*) FROM requests`).Scan(&left))
	require.Equal(t, len(newIDs), left)
}
