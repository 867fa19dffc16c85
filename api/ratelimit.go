package api

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/domain"
)

// A Limit lets each key (a client IP, a user) make PerSecond requests per
// second, with a burst of one second's worth (at least one request). Scope
// names the limit, so different limits keep different counts; PerSecond 0
// turns it off.
type Limit struct {
	Scope     string
	PerSecond float64
	Key       func(*fiber.Ctx) string
}

// PerIP is the per-client-IP limit, RATE_LIMIT_PER_IP: a generous ceiling,
// since many real users can share one NAT address (SPEC §6).
func PerIP(s *Server) Limit {
	return Limit{Scope: "ip", PerSecond: s.Config().RateLimitPerIP, Key: ClientIP}
}

// PerUser is the per-user limit on writes, RATE_LIMIT_PER_USER.
func PerUser(s *Server) Limit {
	return Limit{Scope: "user", PerSecond: s.Config().RateLimitPerUser, Key: func(c *fiber.Ctx) string { return Principal(c).UserID }}
}

// ClientIP keys a limit by the client's IP address.
func ClientIP(c *fiber.Ctx) string { return c.IP() }

// LimitPerIP is RateLimit with PerIP alone, for the public routes under
// /api/v1/public.
func LimitPerIP(s *Server) fiber.Handler { return RateLimit(s.Redis, s.Log, PerIP(s)) }

// RateLimit answers a request over any of limits 429 RATE_LIMITED with
// Retry-After, for the longest wait among the limits it is over. The counts
// live in Redis, so the limits hold across API replicas.
//
// Every limit is checked in the same Redis round trip: one pipeline of one
// GCRA script call per limit. go-redis/redis_rate, which holdfast used
// before, runs one limit per round trip; in a rush each write passes two
// limits, and their separate round trips cost the API and Redis more CPU
// than the scripts themselves (README, Benchmarks). A request is counted
// against every limit, including one it is refused by another. In Redis
// Cluster the pipeline sends each key to its own shard.
func RateLimit(rdb redis.UniversalClient, log *slog.Logger, limits ...Limit) fiber.Handler {
	return Guard(rdb, log, Window{}, limits...)
}

// A Window turns away a repeat: a request whose key was claimed less than
// Duration ago is answered 429 DUPLICATE_REQUEST (seed 004 §9's dup:req).
// The claim is given back when the request is refused or not accepted (the
// handler returns an error), so a failed attempt does not lock its sender
// out. A Key of "" leaves the request out of the window; Duration 0 turns
// the window off.
type Window struct {
	Duration time.Duration
	Key      func(*fiber.Ctx) string
}

// Guard is RateLimit and a duplicate window, checked in one Redis round
// trip: the window's claim (SET NX) rides in the limits' pipeline. A
// request over a limit is answered RATE_LIMITED whether or not it is also a
// duplicate.
func Guard(rdb redis.UniversalClient, log *slog.Logger, w Window, limits ...Limit) fiber.Handler {
	var on []Limit
	for _, l := range limits {
		if l.PerSecond > 0 {
			on = append(on, l)
		}
	}
	if len(on) == 0 && w.Duration <= 0 {
		return func(c *fiber.Ctx) error { return c.Next() }
	}
	g := gcra{rdb: rdb}
	args := make([][]any, len(on))
	scopes := make([]string, len(on))
	for i, l := range on {
		interval, tolerance := l.gcra()
		args[i] = []any{interval, tolerance}
		scopes[i] = l.Scope
	}
	return func(c *fiber.Ctx) error {
		ctx := c.UserContext()
		keys := make([]string, len(on))
		for i, l := range on {
			keys[i] = "hf:" + l.Scope + ":" + l.Key(c)
		}
		var claim string
		if w.Duration > 0 {
			claim = w.Key(c)
		}
		wait, fresh, err := g.check(ctx, keys, args, claim, w.Duration)
		if err != nil {
			// A guard that cannot count fails open: refusing every write
			// because Redis blinked would be worse than a moment unguarded.
			log.WarnContext(ctx, "rate limiter unavailable; letting the request through", "scopes", scopes, "err", err)
			return c.Next()
		}
		if wait > 0 {
			if fresh {
				rdb.Del(context.WithoutCancel(ctx), claim)
			}
			secs := max(1, int(math.Ceil(wait.Seconds())))
			return domain.NewProblem(http.StatusTooManyRequests, domain.CodeRateLimited,
				"too many requests; retry in %d s", secs).WithMeta("retryAfterSeconds", secs)
		}
		if claim != "" && !fresh {
			secs := max(1, int(math.Ceil(w.Duration.Seconds())))
			return domain.NewProblem(http.StatusTooManyRequests, domain.CodeDuplicateRequest,
				"you sent this request a moment ago; wait for its outcome").WithMeta("retryAfterSeconds", secs)
		}
		err = c.Next()
		if err != nil && claim != "" { // not accepted: the window must not lock the sender out
			rdb.Del(context.WithoutCancel(ctx), claim)
		}
		return err
	}
}

// gcra returns the limit's emission interval (the time one request uses up)
// and its burst tolerance, in microseconds: a burst of PerSecond requests,
// at least one.
func (l Limit) gcra() (interval, tolerance int64) {
	interval = max(1, int64(math.Round(1e6/l.PerSecond)))
	return interval, interval * max(1, int64(math.Ceil(l.PerSecond)))
}

// gcraScript is the generic cell rate algorithm for one key. KEYS[1] holds
// the key's theoretical arrival time (TAT) in microseconds of Redis' clock;
// ARGV are the emission interval and the burst tolerance in microseconds. A
// request is allowed when the TAT it would leave is at most the tolerance
// ahead of now; the script then stores it, to expire once it has passed,
// and returns 0. Otherwise it returns the microseconds until the request
// would be allowed. Microseconds since 1970 stay below 2^53, so Lua's
// doubles hold them exactly; %d writes them without an exponent.
var gcraScript = redis.NewScript(`
redis.replicate_commands()
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local interval, tolerance = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = math.max(tonumber(redis.call('GET', KEYS[1])) or now, now) + interval
local wait = tat - tolerance - now
if wait > 0 then return wait end
redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', math.ceil((tat - now) / 1000))
return 0
`)

type gcra struct{ rdb redis.UniversalClient }

// check runs the script for each key with its args and claims claim (when
// not "") for window, all in one pipeline. It returns the longest wait (0:
// allowed by every limit) and whether the claim was fresh. After Redis lost
// its scripts (a restart, a failover) it loads the script and runs the
// scripts once more; the claim, already made, is not repeated.
func (g gcra) check(ctx context.Context, keys []string, args [][]any, claim string, window time.Duration) (wait time.Duration, fresh bool, err error) {
	if len(keys) == 0 && claim == "" {
		return 0, false, nil
	}
	scripts := make([]*redis.Cmd, len(keys))
	var claimed *redis.BoolCmd
	send := func(p redis.Pipeliner, withClaim bool) error {
		for i, k := range keys {
			scripts[i] = gcraScript.EvalSha(ctx, p, []string{k}, args[i]...)
		}
		if withClaim && claim != "" {
			claimed = p.SetNX(ctx, claim, 1, window)
		}
		return nil
	}
	_, err = g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { return send(p, true) })
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err := gcraScript.Load(ctx, g.rdb).Err(); err != nil {
			return 0, false, fmt.Errorf("rate limit: load script: %w", err)
		}
		_, err = g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { return send(p, false) })
	}
	if err != nil {
		return 0, false, fmt.Errorf("rate limit: %w", err)
	}
	if claimed != nil {
		if fresh, err = claimed.Result(); err != nil {
			return 0, false, fmt.Errorf("duplicate window: %w", err)
		}
	}
	var us int64
	for _, cmd := range scripts {
		w, err := cmd.Int64()
		if err != nil {
			return 0, false, fmt.Errorf("rate limit: %w", err)
		}
		us = max(us, w)
	}
	return time.Duration(us) * time.Microsecond, fresh, nil
}
