package storage

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
)

// Unavailable reports whether err means Postgres or Redis could not serve
// the call right now — unreachable, restarting, out of connections or
// memory, slower than the caller's deadline, or rolled back for a deadlock
// with another transaction — rather than that the call
// itself was wrong. The API answers such errors 503 UNAVAILABLE with
// Retry-After; the worker retries them.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, ErrRedisAway) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08", "53", "57", "58": // connection, insufficient resources, operator intervention, system
			return true
		}
		return RolledBack(err) // the same call may pass now
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	if errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.Timeout(err) {
		return true
	}
	var redisErr redis.Error
	if errors.As(err, &redisErr) {
		// Redis is loading, out of memory, a replica, failing over or busy.
		for _, prefix := range []string{"LOADING", "OOM", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY"} {
			if strings.HasPrefix(redisErr.Error(), prefix) {
				return true
			}
		}
	}
	return false
}

// RolledBack reports whether Postgres rolled the statement back to break a
// deadlock or a serialization conflict (SQLSTATE class 40): nothing of it
// was done, and running it again may succeed.
func RolledBack(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "40")
}
