package api

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/storage"
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

// Limits are the configured rate limits over the API's Redis, for a
// vertical's routes: PerIP (RATE_LIMIT_PER_IP), a generous ceiling, since
// many real users can share one NAT address (SPEC §6), and PerUser
// (RATE_LIMIT_PER_USER) on writes.
type Limits struct {
	Redis          redis.UniversalClient
	Log            *slog.Logger
	PerIP, PerUser Limit
}

// Limits are the server's rate limits, as its configuration sets them.
func (s *Server) Limits() Limits {
	return Limits{Redis: s.Redis, Log: s.Log,
		PerIP:   Limit{Scope: "ip", PerSecond: s.cfg.RateLimitPerIP, Key: ClientIP},
		PerUser: Limit{Scope: "user", PerSecond: s.cfg.RateLimitPerUser, Key: func(c *fiber.Ctx) string { return Principal(c).UserID }},
	}
}

// Public is PerIP alone, for the public routes under /api/v1/public.
func (l Limits) Public() fiber.Handler { return RateLimit(l.Redis, l.Log, l.PerIP) }

// Writes is PerIP and PerUser, for write routes.
func (l Limits) Writes() fiber.Handler { return RateLimit(l.Redis, l.Log, l.PerIP, l.PerUser) }

// Guard is PerIP and PerUser with the window w (Guard).
func (l Limits) Guard(w Window) fiber.Handler { return Guard(l.Redis, l.Log, w, l.PerIP, l.PerUser) }

// ClientIP keys a limit by the client's IP address.
func ClientIP(c *fiber.Ctx) string { return c.IP() }

// RateLimit answers a request over any of limits 429 RATE_LIMITED with
// Retry-After, for the longest wait among the limits it is over. The counts
// live in Redis, so the limits hold across API replicas.
//
// Every limit is checked in the same Redis round trip: one pipeline of one
// GCRA script call per limit. go-redis/redis_rate, which holdfast used
// before, runs one limit per round trip; in a rush each write passes two
// limits, and their separate round trips cost the API and Redis more CPU
// than the scripts themselves (docs/benchmarks.md). A request is counted
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
	// Valid, when set, checks a repeat as the handler would, with no side
	// effects, before it is answered DUPLICATE_REQUEST, so a malformed or
	// refused repeat gets the answer its first attempt would have got.
	Valid func(*fiber.Ctx) error
}

// claim states of a request in a window.
type claimState int

const (
	noClaim      claimState = iota // no window, or the request is left out of it
	claimFresh                     // this request holds the window
	claimTaken                     // an earlier request holds it
	claimUnknown                   // Redis did not answer for the claim
)

// giveBackWithin bounds the give-back of a claim whose request was not
// accepted, past the request's deadline; one Redis does not answer that
// soon is left to the claim's expiry (the window).
const giveBackWithin = 250 * time.Millisecond

// checkWithin bounds the guard's wait on Redis, past which the limits fail
// open: at most checkCap, and half of what the request has left
// (DEPENDENCY_TIMEOUT), so that a frozen Redis leaves the write most of its
// time (the API's breaker then skips Redis for everyone, storage.Breaker).
// A request without a deadline waits as go-redis does.
func checkWithin(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, min(checkCap, time.Until(d)/2))
}

// checkCap is the longest the limits wait on Redis. The checks of
// concurrent requests go in one pipeline (storage.Batcher), so while the
// breaker probes a frozen Redis every request of that pipeline waits it
// out: make redis-away measured 3,299 202s a second and a p95 of 258 ms at
// 250 ms against 1,704 and 1,028 ms at half the deadline (1 s), in a pair
// of runs before the group commit's post had a bound of its own. A Redis
// slower than this under load lets that pipeline's requests through
// unlimited.
const checkCap = 250 * time.Millisecond

// Guard is RateLimit and a duplicate window, checked in one Redis round
// trip: the window's claim rides in the limits' pipeline. A request over a
// limit is answered RATE_LIMITED whether or not it is also a duplicate.
//
// The claim stores a token of the request's own and reads it back in the
// same pipeline, so a pipeline that go-redis sent again after a lost reply
// still finds the claim its own. When Redis fails, the limits fail open
// but the window keeps what Redis did say: a repeat it saw is still
// refused, and a claim this request may hold is given back if the request
// is not accepted.
func Guard(rdb redis.UniversalClient, log *slog.Logger, w Window, limits ...Limit) fiber.Handler {
	gd := guard{gcra: gcra{rdb: rdb, batch: storage.NewBatcher(rdb)}, log: log, w: w}
	for _, l := range limits {
		if l.PerSecond > 0 {
			interval, tolerance := l.gcra()
			gd.on = append(gd.on, l)
			gd.args = append(gd.args, []any{interval, tolerance})
		}
	}
	if len(gd.on) == 0 && w.Duration <= 0 {
		return func(c *fiber.Ctx) error { return c.Next() }
	}
	return gd.serve
}

// guard is Guard's handler: the limits that are on, each with its
// script's arguments.
type guard struct {
	gcra
	log  *slog.Logger
	w    Window
	on   []Limit
	args [][]any
}

func (gd *guard) serve(c *fiber.Ctx) error {
	ctx := c.UserContext()
	keys := make([]string, len(gd.on))
	for i, l := range gd.on {
		keys[i] = "hf:" + l.Scope + ":" + l.Key(c)
	}
	var cl claim
	if gd.w.Duration > 0 {
		if cl.key = gd.w.Key(c); cl.key != "" {
			cl.token, cl.ttl = strconv.FormatUint(rand.Uint64(), 36), gd.w.Duration
		}
	}
	cctx, cancel := checkWithin(ctx)
	wait, st, err := gd.check(cctx, keys, gd.args, cl)
	cancel()
	if err != nil {
		// Limits that cannot count fail open: refusing every write
		// because Redis blinked would be worse than a moment unlimited.
		scopes := make([]string, len(gd.on))
		for i, l := range gd.on {
			scopes[i] = l.Scope
		}
		gd.log.WarnContext(ctx, "rate limiter unavailable; letting the request through", "scopes", scopes, "err", err)
	}
	giveBack := func() {
		if st == claimFresh || st == claimUnknown {
			// Before the answer, so that a corrected request sent at once
			// finds the claim gone; but within giveBackWithin, past the
			// request's own deadline: Redis may be what failed it.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackWithin)
			defer cancel()
			releaseScript.Run(rctx, gd.rdb, []string{cl.key}, cl.token)
		}
	}
	if wait > 0 {
		giveBack()
		secs := max(1, int(math.Ceil(wait.Seconds())))
		return domain.NewProblem(domain.CodeRateLimited,
			"too many requests; retry in %d s", secs).WithMeta("retryAfterSeconds", secs)
	}
	if st == claimTaken {
		if gd.w.Valid != nil {
			if err := gd.w.Valid(c); err != nil {
				return err
			}
		}
		secs := max(1, int(math.Ceil(gd.w.Duration.Seconds())))
		return domain.NewProblem(domain.CodeDuplicateRequest,
			"you sent this request a moment ago; wait for its outcome").WithMeta("retryAfterSeconds", secs)
	}
	err = c.Next()
	if err != nil { // not accepted: the window must not lock the sender out
		giveBack()
	}
	return err
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

// releaseScript deletes a window's claim if it still holds the token of the
// request giving it back. KEYS: the claim. ARGV: the token.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// claim is a request's claim on a window; key "" is none.
type claim struct {
	key, token string
	ttl        time.Duration
}

// gcra checks limits and claims windows; concurrent requests' checks go to
// Redis together (storage.Batcher), so a rush costs a round trip per batch
// of requests rather than per request.
type gcra struct {
	rdb   redis.UniversalClient
	batch *storage.Batcher
}

// check runs the script for each key with its args and makes the claim, all
// in one pipeline. It returns the longest wait (0: allowed by every limit)
// and the claim's state, which it reports even when a script failed (err).
// After Redis lost its scripts (a restart, a failover) it loads the script
// and runs again the calls that failed for it; the claim is not repeated.
func (g gcra) check(ctx context.Context, keys []string, args [][]any, cl claim) (time.Duration, claimState, error) {
	if len(keys) == 0 && cl.key == "" {
		return 0, noClaim, nil
	}
	scripts := make([]*redis.Cmd, len(keys))
	var held *redis.StringCmd
	_ = g.batch.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			scripts[i] = gcraScript.EvalSha(ctx, p, []string{k}, args[i]...)
		}
		if cl.key != "" {
			p.SetNX(ctx, cl.key, cl.token, cl.ttl)
			held = p.Get(ctx, cl.key)
		}
		return nil
	})
	st := noClaim
	if held != nil {
		switch v, err := held.Result(); {
		case err != nil:
			st = claimUnknown
		case v == cl.token:
			st = claimFresh
		default:
			st = claimTaken
		}
	}
	var again []int
	for i, cmd := range scripts {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		if err := gcraScript.Load(ctx, g.rdb).Err(); err != nil {
			return 0, st, fmt.Errorf("rate limit: load script: %w", err)
		}
		_, _ = g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range again {
				scripts[i] = gcraScript.EvalSha(ctx, p, []string{keys[i]}, args[i]...)
			}
			return nil
		})
	}
	var us int64
	for _, cmd := range scripts {
		w, err := cmd.Int64()
		if err != nil {
			return 0, st, fmt.Errorf("rate limit: %w", err)
		}
		us = max(us, w)
	}
	return time.Duration(us) * time.Microsecond, st, nil
}
