package requests

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
)

func pendingBatch(t *testing.T, n int, payload string) []*pending {
	batch := make([]*pending, n)
	for i := range batch {
		id, err := uuid.NewV7()
		require.NoError(t, err)
		batch[i] = &pending{id: id, now: time.Now().UTC(), sub: &Submission{
			Type: "t", Queue: "q", UserID: "u", Keys: []string{"k"}, Payload: json.RawMessage(payload)}}
	}
	return batch
}

// A flush whose INSERT failed after its rows were stored (as when the
// connection drops during the commit) still hands every caller its stored
// request; a flush that stored nothing hands every caller the error.
func TestGroupFlushResolvesAFailedInsertByWhatIsStored(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	g := &groupCommit{store: NewStore(pool), timeout: time.Minute,
		post: func(_ context.Context, rs []*Request) ([]Posting, error) { return make([]Posting, len(rs)), nil }}
	ctx := context.Background()

	stored := pendingBatch(t, 3, `{}`)
	first, err := g.store.insertMany(ctx, stored)
	require.NoError(t, err)
	_, err = g.store.insertMany(ctx, stored)
	require.Error(t, err, "the same ids again: the INSERT fails although the rows are there")
	g.flush(ctx, stored)
	for i, p := range stored {
		<-p.done
		require.NoError(t, p.err)
		require.Equal(t, first[i].Seq, p.r.Seq)
	}

	lost := pendingBatch(t, 3, `{`) // not JSON: the INSERT fails and stores nothing
	g.flush(ctx, lost)
	for _, p := range lost {
		<-p.done
		require.Error(t, p.err)
		require.Nil(t, p.r)
	}
}

// Batches reach their mailboxes in seq order even when an earlier batch's
// post is slow: each waits for the one before, so a drain never sees a
// later batch without the earlier one. Without the wait the second batch,
// posted at once, would arrive first.
func TestGroupPostsBatchesInSeqOrder(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	var mu sync.Mutex
	var order []int64
	calls := 0
	g := &groupCommit{store: NewStore(pool), timeout: time.Minute, post: func(_ context.Context, rs []*Request) ([]Posting, error) {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if first {
			time.Sleep(150 * time.Millisecond)
		}
		mu.Lock()
		order = append(order, rs[0].Seq)
		mu.Unlock()
		return make([]Posting, len(rs)), nil
	}}
	ctx := context.Background()
	a, b := pendingBatch(t, 2, `{}`), pendingBatch(t, 2, `{}`)
	g.flush(ctx, a)
	g.flush(ctx, b)
	<-a[0].done
	<-b[0].done
	require.Less(t, a[0].r.Seq, b[0].r.Seq)
	require.Equal(t, []int64{a[0].r.Seq, b[0].r.Seq}, order)
	for _, p := range append(a, b...) {
		<-p.done
		require.True(t, p.posted)
	}
}

// A post that panics counts as failed: every caller is still woken, none
// counts as posted, so each posts its own request.
func TestGroupPostThatPanicsLeavesEachCallerToPost(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	g := &groupCommit{store: NewStore(pool), timeout: time.Minute, post: func(context.Context, []*Request) ([]Posting, error) {
		panic("post broke")
	}}
	batch := pendingBatch(t, 3, `{}`)
	g.flush(context.Background(), batch)
	for _, p := range batch {
		<-p.done
		require.NoError(t, p.err)
		require.NotNil(t, p.r, "stored")
		require.False(t, p.posted)
	}
}

// A batch whose INSERT panics answers every submission in it with an
// error, so none of its callers is left waiting, and the panic goes on.
func TestGroupFlushThatPanicsAnswersEveryCaller(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	g := &groupCommit{store: NewStore(pool), timeout: time.Minute,
		post: func(_ context.Context, rs []*Request) ([]Posting, error) { return make([]Posting, len(rs)), nil }}
	batch := pendingBatch(t, 3, `{}`)
	batch[1].sub = nil // encoding its keys panics
	require.Panics(t, func() { g.flush(context.Background(), batch) })
	for _, p := range batch {
		<-p.done
		require.ErrorIs(t, p.err, errGroupCommit)
		require.Nil(t, p.r)
	}
	require.Nil(t, g.posted, "no post was started")
}

// With GROUP_COMMIT=false a write is stored alone, as a batch of one, and
// resolved the same way: an INSERT that failed after its row was stored
// hands back the stored request; one that stored nothing, the error.
func TestStoreBatchOfOneResolvesAFailedInsertByWhatIsStored(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	s := NewStore(pool)
	ctx := context.Background()

	p := pendingBatch(t, 1, `{}`)[0]
	first, _, err := s.Insert(ctx, p.sub, p.id, p.now)
	require.NoError(t, err)
	_, _, err = s.Insert(ctx, p.sub, p.id, p.now)
	require.Error(t, err, "the same id again: the INSERT fails although the row is there")
	s.storeBatch(ctx, []*pending{p}, time.Minute)
	require.NoError(t, p.err)
	require.Equal(t, first.Seq, p.r.Seq)

	lost := pendingBatch(t, 1, `{`)[0] // not JSON: the INSERT fails and stores nothing
	s.storeBatch(ctx, []*pending{lost}, time.Minute)
	require.Error(t, lost.err)
	require.Nil(t, lost.r)
}
