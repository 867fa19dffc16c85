package requests

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/testenv"
)

// A queued request reads as processing once a drain of one of its keys has
// marked its seq (MarkProcessing), and as its outcome once completed. The
// mark is per key and only moves forward; a request on several keys is
// processing once any of them is marked past it; a request whose dispatch
// failed stays queued; an idempotent replay reads the same as Get.
func TestRequestReadsProcessingOnceItsKeyIsMarkedPastIt(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	store := NewStore(pool)
	ctx := context.Background()
	insert := func(keys []string, idemKey string) *Request {
		t.Helper()
		id, err := uuid.NewV7()
		require.NoError(t, err)
		r, created, err := storeOne(ctx, store, &Submission{Type: "t", Queue: "q", UserID: "u", Keys: keys,
			Payload: json.RawMessage(`{}`), Route: "POST /t", IdempotencyKey: idemKey}, id)
		require.NoError(t, err)
		require.True(t, created)
		return r
	}
	status := func(r *Request) domain.Status {
		t.Helper()
		got, err := store.Get(ctx, r.ID)
		require.NoError(t, err)
		return got.Status
	}
	first, lost := insert([]string{"k"}, ""), insert([]string{"k"}, "")
	second, third := insert([]string{"k"}, "idem-1"), insert([]string{"k"}, "")
	multi := insert([]string{"a", "k"}, "")
	for _, r := range []*Request{first, lost, second, third, multi} {
		require.Equal(t, domain.StatusQueued, status(r))
	}
	_, err := store.marks.Get(ctx, lost.ID)
	require.NoError(t, err)

	require.NoError(t, store.MarkProcessing(ctx, map[string]int64{"k": second.Seq}))
	require.Equal(t, domain.StatusProcessing, status(first))
	require.Equal(t, domain.StatusProcessing, status(second))
	require.Equal(t, domain.StatusQueued, status(lost), "not in its mailbox: nothing works on it")
	require.Equal(t, domain.StatusQueued, status(third), "past the mark")
	require.Equal(t, domain.StatusQueued, status(multi))

	replay, created, err := storeOne(ctx, store, &Submission{Type: "t", Queue: "q", UserID: "u", Keys: []string{"k"},
		Payload: json.RawMessage(`{}`), Route: "POST /t", IdempotencyKey: "idem-1"}, uuid.New())
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, second.ID, replay.ID)
	require.Equal(t, domain.StatusProcessing, replay.Status, "a replay reads as Get does")

	require.NoError(t, store.MarkProcessing(ctx, map[string]int64{"k": first.Seq}))
	require.Equal(t, domain.StatusProcessing, status(second), "the mark does not move back")

	require.NoError(t, store.MarkProcessing(ctx, map[string]int64{"a": multi.Seq}))
	require.Equal(t, domain.StatusProcessing, status(multi), "marked on one of its keys")
	require.Equal(t, domain.StatusQueued, status(third), "another key's mark")

	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		open, err := LockOpen(ctx, tx, []uuid.UUID{first.ID})
		require.NoError(t, err)
		require.Len(t, open, 1)
		return Complete(ctx, tx, open, []Outcome{Succeeded(map[string]int{"n": 1})}, time.Now().UTC())
	}))
	require.Equal(t, domain.StatusSucceeded, status(first), "an outcome overrides the mark")
}

// The two column lists name the same columns in scan's order, the view's
// with status computed.
func TestColumnListsAgree(t *testing.T) {
	view := strings.Join(strings.Fields(viewColumns), " ")
	start, end := strings.Index(view, "CASE "), strings.Index(view, " END")
	require.Positive(t, start)
	require.Equal(t, columns, view[:start]+"status"+view[end+len(" END"):])
}

// storeOne stores sub under id as intake does with GROUP_COMMIT=false, and
// returns the request stored, or the one its Idempotency-Key replays.
func storeOne(ctx context.Context, s *Store, sub *Submission, id uuid.UUID) (*Request, bool, error) {
	p := &pending{sub: sub, id: id}
	s.storeBatch(ctx, []*pending{p}, time.Minute)
	return p.r, p.created, p.err
}
