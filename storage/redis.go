package storage

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/config"
)

// redisPoolSize is the least connection pool of a process (per node in a
// cluster): the API and the worker make many small round trips at once.
const redisPoolSize = 64

// redisDialTries is how many times a connection is dialled for one command
// before the command fails (go-redis then retries the command itself, with
// backoff, MaxRetries times). go-redis' default of five, 100 ms apart,
// made every command on a write's path take 2 s while Redis was down, and
// a write answered after 8–11 s; with one it answers within about a second
// (e2e.TestRedisDownWritesAreAcceptedDurably).
const redisDialTries = 1

// Every client keeps its callers' deadlines (ContextTimeoutEnabled): a
// command waits on a frozen Redis no longer than its caller may (the API's
// DEPENDENCY_TIMEOUT), instead of go-redis' own read timeout and the
// freeze's end, whichever came first (a frozen Redis held writes 5 s with
// a 2 s DEPENDENCY_TIMEOUT: e2e.TestAnswersComeWithinTheDeadlineWhileAStoreFreezes).

// NewRedis builds the go-redis client of the deployment r selects, without
// connecting: a plain client for REDIS_URL, a cluster client for
// REDIS_CLUSTER_ADDRS (it routes each command, script and pipeline part to
// its slot's node; every holdfast script keeps its keys in one slot), or a
// failover client that asks the sentinels for the current primary.
func NewRedis(r config.Redis) (redis.UniversalClient, error) {
	switch r.Topology() {
	case "cluster":
		return redis.NewClusterClient(clusterOptions(r)), nil
	case "sentinel":
		return redis.NewFailoverClient(failoverOptions(r)), nil
	}
	opt, err := redis.ParseURL(r.URL)
	if err != nil {
		return nil, fmt.Errorf("storage: parse REDIS_URL: %w", err)
	}
	opt.PoolSize = max(opt.PoolSize, redisPoolSize)
	opt.DialerRetries = redisDialTries
	opt.ContextTimeoutEnabled = true
	return redis.NewClient(opt), nil
}

func clusterOptions(r config.Redis) *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: r.ClusterAddrs, Username: r.Username, Password: r.Password, PoolSize: redisPoolSize,
		DialerRetries: redisDialTries, ContextTimeoutEnabled: true}
}

func failoverOptions(r config.Redis) *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: r.SentinelMaster, SentinelAddrs: r.SentinelAddrs,
		SentinelPassword: r.SentinelPassword, Username: r.Username, Password: r.Password, PoolSize: redisPoolSize,
		DialerRetries: redisDialTries, ContextTimeoutEnabled: true}
}

// AsynqRedisOpt is r as Asynq's connection options, for the components that
// open their own connection (Asynqmon); everything else shares the client of
// NewRedis.
func AsynqRedisOpt(r config.Redis) (asynq.RedisConnOpt, error) {
	switch r.Topology() {
	case "cluster":
		return asynq.RedisClusterClientOpt{Addrs: r.ClusterAddrs, Username: r.Username, Password: r.Password}, nil
	case "sentinel":
		return asynq.RedisFailoverClientOpt{MasterName: r.SentinelMaster, SentinelAddrs: r.SentinelAddrs,
			SentinelPassword: r.SentinelPassword, Username: r.Username, Password: r.Password}, nil
	}
	opt, err := asynq.ParseRedisURI(r.URL)
	if err != nil {
		return nil, fmt.Errorf("storage: parse REDIS_URL: %w", err)
	}
	return opt, nil
}

// OpenRedis connects to the deployment r selects and checks it answers.
func OpenRedis(ctx context.Context, r config.Redis) (redis.UniversalClient, error) {
	c, err := NewRedis(r)
	if err != nil {
		return nil, err
	}
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("storage: ping redis (%s): %w", r.Topology(), err)
	}
	return c, nil
}

// Ready reports whether Postgres and Redis both answer (/readyz).
func Ready(ctx context.Context, pool interface{ Ping(context.Context) error }, rdb redis.UniversalClient) error {
	if err := pool.Ping(ctx); err != nil {
		return errors.New("postgres unreachable")
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		return errors.New("redis unreachable")
	}
	return nil
}

// Stores are a process's connections.
type Stores struct {
	Pool  *pgxpool.Pool
	Redis redis.UniversalClient
}

// Open connects to Postgres (pool of maxConns) and Redis, and applies the
// migrations or checks that they were applied (schema): what each binary
// does first.
func Open(ctx context.Context, databaseURL string, rc config.Redis, maxConns int32, schema Schema, opts ...PGOption) (*Stores, error) {
	pool, err := OpenPostgres(ctx, databaseURL, maxConns, opts...)
	if err != nil {
		return nil, err
	}
	if err := schema.prepare(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	rdb, err := OpenRedis(ctx, rc)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &Stores{Pool: pool, Redis: rdb}, nil
}

// Close closes both connections.
func (s *Stores) Close() {
	_ = s.Redis.Close()
	s.Pool.Close()
}
