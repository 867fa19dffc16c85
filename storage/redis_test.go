package storage

import (
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/config"
)

// One Redis selection builds both clients: go-redis for mailboxes, leases
// and scripts, and Asynq's connection options for Asynqmon. A cluster or
// sentinel setting must reach both with the same addresses and credentials,
// or the queue and the mailboxes would live on different deployments.
func TestRedisSelectionBuildsBothClients(t *testing.T) {
	load := func(vars map[string]string) config.Redis {
		vars["JWT_SECRET"] = "0123456789abcdef0123456789abcdef"
		c, err := config.FromMap(vars)
		require.NoError(t, err)
		return c.Redis
	}

	sentinel := load(map[string]string{"REDIS_SENTINEL_ADDRS": "10.0.0.1:26379,10.0.0.2:26379", "REDIS_SENTINEL_MASTER": "holdfast",
		"REDIS_SENTINEL_PASSWORD": "spw", "REDIS_USERNAME": "hf", "REDIS_PASSWORD": "pw"})
	fo := failoverOptions(sentinel)
	require.Equal(t, "holdfast", fo.MasterName)
	require.Equal(t, []string{"10.0.0.1:26379", "10.0.0.2:26379"}, fo.SentinelAddrs)
	require.Equal(t, []string{"spw", "hf", "pw"}, []string{fo.SentinelPassword, fo.Username, fo.Password})
	require.Equal(t, redisPoolSize, fo.PoolSize)
	opt, err := AsynqRedisOpt(sentinel)
	require.NoError(t, err)
	require.Equal(t, asynq.RedisFailoverClientOpt{MasterName: "holdfast", SentinelAddrs: fo.SentinelAddrs,
		SentinelPassword: "spw", Username: "hf", Password: "pw"}, opt)
	c, err := NewRedis(sentinel)
	require.NoError(t, err)
	require.IsType(t, &redis.Client{}, c, "a failover client is a plain client that asks the sentinels for the primary")
	require.NoError(t, c.Close())

	cluster := load(map[string]string{"REDIS_CLUSTER_ADDRS": "10.0.0.1:7000,10.0.0.2:7000", "REDIS_PASSWORD": "pw"})
	co := clusterOptions(cluster)
	require.Equal(t, []string{"10.0.0.1:7000", "10.0.0.2:7000"}, co.Addrs)
	require.Equal(t, "pw", co.Password)
	opt, err = AsynqRedisOpt(cluster)
	require.NoError(t, err)
	require.Equal(t, asynq.RedisClusterClientOpt{Addrs: co.Addrs, Password: "pw"}, opt)
	c, err = NewRedis(cluster)
	require.NoError(t, err)
	require.IsType(t, &redis.ClusterClient{}, c)
	require.NoError(t, c.Close())

	single := load(map[string]string{"REDIS_URL": "redis://:pw@10.0.0.9:6380/3"})
	opt, err = AsynqRedisOpt(single)
	require.NoError(t, err)
	require.Equal(t, asynq.RedisClientOpt{Addr: "10.0.0.9:6380", Password: "pw", DB: 3}, opt)
	c, err = NewRedis(single)
	require.NoError(t, err)
	require.Equal(t, "10.0.0.9:6380", c.(*redis.Client).Options().Addr)
	require.Equal(t, 3, c.(*redis.Client).Options().DB)
	require.NoError(t, c.Close())
}
