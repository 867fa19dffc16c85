package stays

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/keyed"
)

// A hold script run for a holder whose lease has moved on changes nothing
// and says so as keyed.ErrLeaseLost, which the engine answers by stopping
// the drain (not by retrying the batch and recording its requests failed).
func TestHoldScriptsAreFenced(t *testing.T) {
	_, rdb := testenv.Redis(t)
	ctx := context.Background()
	s := NewHoldStore(rdb)
	now := time.Now()
	h := &Hold{HoldID: "7-a", RoomTypeID: 7, CheckIn: "2030-01-01", CheckOut: "2030-01-03", UserID: "ann",
		ClientHoldKey: "k", CreatedAt: now, ExpiresAt: now.Add(time.Minute)}
	require.NoError(t, rdb.Set(ctx, keyed.LeaseKey(SerialKey(7)), 5, 0).Err())

	require.ErrorIs(t, s.put(ctx, 4, h, "req", []byte(`{}`), time.Minute, now), keyed.ErrLeaseLost)
	require.Zero(t, rdb.Exists(ctx, holdKey(7, h.HoldID)).Val(), "nothing stored")
	require.NoError(t, s.put(ctx, 5, h, "req", []byte(`{}`), time.Minute, now))
	require.ErrorIs(t, s.remove(ctx, 4, h), keyed.ErrLeaseLost)
	require.Equal(t, int64(1), rdb.Exists(ctx, holdKey(7, h.HoldID)).Val(), "nothing removed")
	require.NoError(t, s.remove(ctx, 5, h))
}
