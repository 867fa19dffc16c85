package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/probe"
)

// deploy/redis.conf loads in a real redis-server with the settings the queue
// needs, and the pipeline runs against it.
func TestProductionRedisConfig(t *testing.T) {
	t.Parallel()
	conf, err := filepath.Abs("../deploy/redis.conf")
	require.NoError(t, err)
	url, rdb := testenv.RedisServerWithConfig(t, conf)
	ctx := context.Background()
	for key, want := range map[string]string{
		"maxmemory-policy": "noeviction",
		"appendonly":       "yes",
		"appendfsync":      "everysec",
		"maxmemory":        "2147483648",
		"tcp-keepalive":    "60",
	} {
		got, err := rdb.ConfigGet(ctx, key).Result()
		require.NoError(t, err)
		require.Equal(t, want, got[key], key)
	}

	s := systest.Start(t, systest.Options{RedisURL: url, Workers: 1})
	c := s.Client("prod", domain.RoleUser)
	require.Equal(t, domain.StatusSucceeded, c.Wait(c.Probe(probe.Payload{Keys: []string{"conf"}}), 20*time.Second).Status)
}

// The README sizes Redis' maxmemory from what one queued request costs: its
// task, its mailbox entry and the API's short-lived keys. Measured on a
// private redis-server with no worker running, once with every request on
// its own key (pending tasks) and once on one hot key (deferred tasks).
func TestRedisBytesPerQueuedRequest(t *testing.T) {
	t.Parallel()
	const n = 2000
	for _, c := range []struct {
		name string
		key  func(i int) string
	}{
		{"one key each", func(i int) string { return fmt.Sprintf("k%d", i) }},
		{"one hot key", func(int) string { return "hot" }},
	} {
		url, rdb := testenv.RedisServer(t)
		s := systest.Start(t, systest.Options{RedisURL: url})
		before := usedMemory(t, rdb)
		submitMany(t, s, 8, n, func(i int) probe.Payload { return probe.Payload{Keys: []string{c.key(i)}} })
		per := float64(usedMemory(t, rdb)-before) / n
		t.Logf("%s: %.0f bytes of Redis per queued request", c.name, per)
		require.Positive(t, per)
		require.Less(t, per, 2048.0, "the README's sizing guidance assumes about 1 KiB")
	}
}

func usedMemory(t *testing.T, rdb redis.UniversalClient) int64 {
	t.Helper()
	info, err := rdb.InfoMap(context.Background(), "memory").Result()
	require.NoError(t, err)
	v, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	require.NoError(t, err)
	return v
}
