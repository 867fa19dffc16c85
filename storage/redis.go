package storage

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
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

// Stores are a process's connections.
type Stores struct {
	Pool  *pgxpool.Pool
	Redis redis.UniversalClient
}

// Open connects to Postgres (pool of maxConns) and Redis and applies the
// migrations: what each binary does first.
func Open(ctx context.Context, databaseURL, redisURL string, maxConns int32) (*Stores, error) {
	pool, err := OpenPostgres(ctx, databaseURL, maxConns)
	if err != nil {
		return nil, err
	}
	if err := Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	rdb, err := OpenRedis(ctx, redisURL)
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
