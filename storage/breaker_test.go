package storage_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/storage"
)

// The API's breaker: once a frozen Redis has failed three calls in a row
// (each waited out its caller's deadline), calls fail at once with
// ErrRedisAway — not sent, pipelines too — until a probe answers; after the
// thaw, the probe closes it and calls are answered again. Error replies
// (a missing key) are Redis answering and never open it. Control: a client
// without the breaker sends its call to the frozen Redis, which waits out
// the deadline like the three before.
func TestBreakerSkipsRedisWhileItIsAway(t *testing.T) {
	t.Parallel()
	url, plain := testenv.RedisServer(t)
	ctx := context.Background()
	rdb, err := storage.OpenRedis(ctx, config.Redis{URL: url})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	var mu sync.Mutex
	var changes []bool
	rdb.AddHook(storage.NewBreaker(slog.New(slog.DiscardHandler), func(open bool) {
		mu.Lock()
		defer mu.Unlock()
		changes = append(changes, open)
	}))
	seen := func() []bool {
		mu.Lock()
		defer mu.Unlock()
		return append([]bool(nil), changes...)
	}
	get := func(c redis.UniversalClient) error {
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		return c.Get(ctx, "absent").Err()
	}
	for range 5 {
		require.ErrorIs(t, get(rdb), redis.Nil)
	}
	require.Empty(t, seen(), "error replies are answers")

	frozen := testenv.FreezeRedis(t, plain)
	// Three failures in a row open it.
	sent := 0
	for err = get(rdb); !errors.Is(err, storage.ErrRedisAway); err = get(rdb) {
		require.True(t, storage.Unavailable(err), "%v", err)
		sent++
	}
	require.Equal(t, 3, sent, "three calls were sent and failed")
	require.Equal(t, []bool{true}, seen(), "opened")
	require.ErrorIs(t, err, storage.ErrRedisAway, "not sent")
	require.True(t, storage.Unavailable(err))
	pipe := rdb.Pipeline()
	set := pipe.Set(ctx, "k", 1, 0)
	_, err = pipe.Exec(ctx)
	require.ErrorIs(t, err, storage.ErrRedisAway)
	require.ErrorIs(t, set.Err(), storage.ErrRedisAway, "each command of a skipped pipeline carries why")
	control := get(plain)
	require.True(t, storage.Unavailable(control))
	require.NotErrorIs(t, control, storage.ErrRedisAway, "without the breaker the call is sent")

	frozen.Thaw()
	require.Eventually(t, func() bool { return errors.Is(get(rdb), redis.Nil) }, 10*time.Second, 50*time.Millisecond,
		"a probe answered")
	require.Equal(t, []bool{true, false}, seen(), "closed again")
	require.NoError(t, rdb.Set(ctx, "k", 1, 0).Err())
}
