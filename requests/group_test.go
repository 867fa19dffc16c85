package requests

import (
	"context"
	"encoding/json"
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
		batch[i] = &pending{id: id, now: time.Now().UTC(), wake: make(chan bool, 1), sub: &Submission{
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
	g := &groupCommit{store: NewStore(pool)}
	ctx := context.Background()

	stored := pendingBatch(t, 3, `{}`)
	first, err := g.store.insertMany(ctx, stored)
	require.NoError(t, err)
	_, err = g.store.insertMany(ctx, stored)
	require.Error(t, err, "the same ids again: the INSERT fails although the rows are there")
	g.flush(ctx, stored, nil)
	for i, p := range stored {
		<-p.wake
		require.NoError(t, p.err)
		require.Equal(t, first[i].Seq, p.r.Seq)
	}

	lost := pendingBatch(t, 3, `{`) // not JSON: the INSERT fails and stores nothing
	g.flush(ctx, lost, nil)
	for _, p := range lost {
		<-p.wake
		require.Error(t, p.err)
		require.Nil(t, p.r)
	}
}
