package api

import (
	"log/slog"
	"math"
	"net/http"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/domain"
)

// RateLimit lets each key (e.g. a client IP) make perSecond requests per
// second, with a burst of one second's worth, and answers the rest
// 429 RATE_LIMITED with Retry-After. The counts live in Redis (GCRA, one
// script call per request), so the limit holds across API replicas. scope
// names the limit, so different limits keep different counts; perSecond 0
// turns the limit off.
func RateLimit(rdb redis.UniversalClient, log *slog.Logger, scope string, perSecond float64, key func(*fiber.Ctx) string) fiber.Handler {
	if perSecond <= 0 {
		return func(c *fiber.Ctx) error { return c.Next() }
	}
	limiter := redis_rate.NewLimiter(rdb)
	limit := rateLimit(perSecond)
	prefix := "hf:" + scope + ":"
	return func(c *fiber.Ctx) error {
		res, err := limiter.Allow(c.UserContext(), prefix+key(c), limit)
		if err != nil {
			// A limiter that cannot count fails open: refusing every read
			// because Redis blinked would be worse than a moment unlimited.
			log.WarnContext(c.UserContext(), "rate limiter unavailable; letting the request through", "scope", scope, "err", err)
			return c.Next()
		}
		if res.Allowed == 0 {
			wait := max(1, int(math.Ceil(res.RetryAfter.Seconds())))
			return domain.NewProblem(http.StatusTooManyRequests, domain.CodeRateLimited,
				"too many requests; retry in %d s", wait).WithMeta("retryAfterSeconds", wait)
		}
		return c.Next()
	}
}

// rateLimit turns a rate that may be fractional (0.5/s) into redis_rate's
// whole count per period: the emission interval 1/perSecond is kept exactly
// to the millisecond by counting per 1000 s.
func rateLimit(perSecond float64) redis_rate.Limit {
	if perSecond == math.Trunc(perSecond) && perSecond <= math.MaxInt32 {
		return redis_rate.PerSecond(int(perSecond))
	}
	return redis_rate.Limit{
		Rate:   max(1, int(math.Round(perSecond*1000))),
		Period: 1000 * time.Second,
		Burst:  max(1, int(math.Ceil(perSecond))),
	}
}

// ClientIP keys a rate limit by the client's IP address.
func ClientIP(c *fiber.Ctx) string { return c.IP() }

// LimitPerIP is RateLimit per client IP at RATE_LIMIT_PER_IP, for the public
// routes under /api/v1/public.
func LimitPerIP(s *Server) fiber.Handler {
	return RateLimit(s.Redis, s.Log, "ip", s.Config().RateLimitPerIP, ClientIP)
}
