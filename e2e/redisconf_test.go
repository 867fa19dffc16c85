package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

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
