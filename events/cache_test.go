package events

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
)

// The settings cache holds the events read within its TTL, not every event
// ever read: entries past it go as a new one is stored, and a lookup still
// answers each event's own settings.
func TestEventCacheKeepsOnlyRecentEvents(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	ctx := context.Background()
	h := &handlers{catalog: NewCatalog(pool)}
	var ids []int64
	for i := range 20 {
		e := newEventSettings()
		e.Name, e.TotalSeats = fmt.Sprintf("cached-%d", i), 1
		ev, err := h.catalog.CreateEvent(ctx, e, nil)
		require.NoError(t, err)
		ids = append(ids, ev.EventID)
	}
	cached := func() int {
		n := 0
		h.events.Range(func(any, any) bool { n++; return true })
		return n
	}
	for i, id := range ids[:19] {
		got, err := h.eventByID(ctx, id)
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("cached-%d", i), got.Name)
	}
	require.Equal(t, 19, cached())
	// Age the entries past the TTL instead of waiting it out: the cache
	// compares them with time.Now, so moving their time back is the same.
	h.events.Range(func(k, v any) bool {
		c := v.(cachedEvent)
		c.at = c.at.Add(-eventCacheTTL - time.Millisecond)
		h.events.Store(k, c)
		return true
	})
	got, err := h.eventByID(ctx, ids[19])
	require.NoError(t, err)
	require.Equal(t, "cached-19", got.Name)
	require.Equal(t, 1, cached(), "the entries past the TTL went as the new one was stored")
}
