package storage

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// OpenRedis connects to REDIS_URL (redis:// or rediss://) and checks it.
func OpenRedis(ctx context.Context, url string) (redis.UniversalClient, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("storage: parse REDIS_URL: %w", err)
	}
	opt.PoolSize = max(opt.PoolSize, 64)
	c := redis.NewClient(opt)
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("storage: ping redis: %w", err)
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
