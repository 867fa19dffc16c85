package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
)

// ErrRedisAway is the error of a Redis call the breaker did not send:
// Redis failed the calls before it, and no probe has answered since. It
// counts as Unavailable (503 with Retry-After, or a write stored and left
// to the reconciler).
var ErrRedisAway = errors.New("storage: redis unreachable: calls skipped until a probe answers")

// Breaker is a circuit breaker for a go-redis client (a redis.Hook): after
// breakerTrips calls in a row failed for want of Redis (refused, dropped,
// timed out), it fails every call at once with ErrRedisAway, for
// breakerOpen; then one call goes through as a probe, and its answer closes
// the breaker or opens it again. While Redis is away, the API's writes are
// stored and marked undispatched at Postgres' pace instead of each waiting
// on Redis (docs/operations.md, "Redis down"). Only the API's client has
// one: a worker has nothing to do without Redis.
type Breaker struct {
	cb *gobreaker.TwoStepCircuitBreaker[struct{}]
}

const (
	// breakerTrips is how many calls in a row must fail before the breaker
	// opens: one call whose caller had little time left says nothing of
	// Redis, and successes in between reset the count.
	breakerTrips = 3
	// breakerOpen is how long the breaker stays open before its probe: how
	// late, at most, the API notices that Redis is back.
	breakerOpen = 500 * time.Millisecond
)

// errNotRedis marks a call whose failure says nothing of Redis (its caller
// went away): counted neither way.
var errNotRedis = errors.New("storage: not Redis' failure")

// NewBreaker is a breaker that logs when it opens and closes, and tells
// opened of each change.
func NewBreaker(log *slog.Logger, opened func(bool)) *Breaker {
	return &Breaker{cb: gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "redis",
		Timeout:     breakerOpen,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= breakerTrips },
		IsExcluded:  func(err error) bool { return errors.Is(err, errNotRedis) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			switch {
			case to == gobreaker.StateOpen && from == gobreaker.StateClosed:
				log.Warn("redis unreachable: calls fail at once until a probe answers", "probeEvery", breakerOpen)
				opened(true)
			case to == gobreaker.StateClosed:
				log.Info("redis answers again")
				opened(false)
			}
		},
	})}
}

// inCall marks the context of a call the breaker let through: what
// go-redis sends within it (a fresh connection's handshake) is part of it.
type inCall struct{}

// call runs one call to Redis through the breaker.
func (b *Breaker) call(ctx context.Context, run func(context.Context) error) error {
	if ctx.Err() != nil || ctx.Value(inCall{}) != nil { // over before it began, or part of a call
		return run(ctx)
	}
	done, err := b.cb.Allow()
	if err != nil {
		return fmt.Errorf("%w (%w)", ErrRedisAway, err)
	}
	err = run(context.WithValue(ctx, inCall{}, true))
	switch {
	case err == nil || !Unavailable(err): // an answer, even an error reply, is Redis answering
		done(nil)
	case errors.Is(err, context.Canceled):
		done(errNotRedis)
	default:
		done(err)
	}
	return err
}

// DialHook is go-redis' dial, unchanged: a failed dial fails its call.
func (b *Breaker) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook runs each command through the breaker.
func (b *Breaker) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := b.call(ctx, func(ctx context.Context) error { return next(ctx, cmd) })
		if errors.Is(err, ErrRedisAway) {
			cmd.SetErr(err)
		}
		return err
	}
}

// ProcessPipelineHook runs each pipeline, and each transaction, through
// the breaker as one call.
func (b *Breaker) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := b.call(ctx, func(ctx context.Context) error { return next(ctx, cmds) })
		if errors.Is(err, ErrRedisAway) {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
		}
		return err
	}
}
