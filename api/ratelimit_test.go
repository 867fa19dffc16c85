package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/api"
	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/internal/testenv"
)

// limited serves GET /api/v1/public/limited behind RateLimit(limits), each
// limit keyed by the X-Who header, and returns its URL.
func limited(t *testing.T, rdb redis.UniversalClient, limits ...api.Limit) string {
	t.Helper()
	return guarded(t, rdb, api.Window{}, limits...)
}

// guarded is limited behind Guard(w, limits). The handler answers 204, or
// 400 when the request has an X-Fail header.
func guarded(t *testing.T, rdb redis.UniversalClient, w api.Window, limits ...api.Limit) string {
	t.Helper()
	for i := range limits {
		limits[i].Key = func(c *fiber.Ctx) string { return c.Get("X-Who") }
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := api.New(config.Config{ShutdownTimeout: time.Second}, api.Deps{Redis: rdb, Registry: prometheus.NewRegistry(), Log: log},
		func(s *api.Server) {
			s.V1().Get("/public/limited", api.Guard(rdb, log, w, limits...), func(c *fiber.Ctx) error {
				if c.Get("X-Fail") != "" {
					return api.InvalidField("x", "told to fail")
				}
				return c.SendStatus(http.StatusNoContent)
			})
		})
	return testenv.Serve(t, s.Serve) + "/api/v1/public/limited"
}

// hit sends one request as who and returns the status and Retry-After.
func hit(t *testing.T, url, who string) (int, string) {
	t.Helper()
	st, retry, _ := send(t, url, "X-Who", who)
	return st, retry
}

// send sends one request with the header name, value pairs and returns the
// status, Retry-After and the error code.
func send(t *testing.T, url string, headers ...string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var env struct{ Error struct{ Code string } }
	_ = json.NewDecoder(res.Body).Decode(&env)
	return res.StatusCode, res.Header.Get("Retry-After"), env.Error.Code
}

// scope is a limit scope of this test alone, so tests sharing a Redis
// database keep their own counts.
func scope(t *testing.T) string { return fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano()) }

// A key gets its burst (one second's worth) at once; the next request is
// refused with 429 and Retry-After, and other keys are not affected.
func TestRateLimitAllowsTheBurstThenRefuses(t *testing.T) {
	t.Parallel()
	_, rdb := testenv.Redis(t)
	url := limited(t, rdb, api.Limit{Scope: scope(t), PerSecond: 3})
	for i := range 3 {
		st, _ := hit(t, url, "a")
		require.Equal(t, http.StatusNoContent, st, "request %d of the burst", i+1)
	}
	st, retry := hit(t, url, "a")
	require.Equal(t, http.StatusTooManyRequests, st)
	require.Equal(t, "1", retry)
	st, _ = hit(t, url, "b")
	require.Equal(t, http.StatusNoContent, st)
	// One emission interval (1/3 s) later a request fits again. The limiter
	// reads Redis's TIME, so only real time passes the interval; a fixed
	// pause rather than retrying until 204, so a longer interval fails.
	time.Sleep(400 * time.Millisecond)
	st, _ = hit(t, url, "a")
	require.Equal(t, http.StatusNoContent, st)
}

// A fractional rate keeps its interval: 0.5/s allows one request, then asks
// for a two-second wait.
func TestRateLimitFractionalRate(t *testing.T) {
	t.Parallel()
	_, rdb := testenv.Redis(t)
	oneThenRefused(t, limited(t, rdb, api.Limit{Scope: scope(t), PerSecond: 0.5}), "a", "2")
}

// Two limits cost one Redis round trip: one pipeline holding a script call
// per limit. A request over either limit is refused, for the longer wait.
func TestRateLimitChecksEveryLimitInOneRoundTrip(t *testing.T) {
	t.Parallel()
	client, rt := countedRedis(t)
	s := scope(t)
	url := limited(t, client, api.Limit{Scope: s + "wide", PerSecond: 1000}, api.Limit{Scope: s + "narrow", PerSecond: 0.5})

	// The first request also loads the script into this Redis.
	st, _ := hit(t, url, "warm")
	require.Equal(t, http.StatusNoContent, st)
	pipelines, alone := took(rt)
	t.Logf("first request: pipelines %v, %d commands alone", pipelines, alone)

	st, _ = hit(t, url, "a")
	require.Equal(t, http.StatusNoContent, st)
	pipelines, alone = took(rt)
	require.Equal(t, []int{2}, pipelines, "one pipeline of two script calls")
	require.Zero(t, alone, "nothing else")

	st, retry := hit(t, url, "a")
	require.Equal(t, http.StatusTooManyRequests, st)
	require.Equal(t, "2", retry, "the narrow limit's wait")
}

// countedRedis is a client of a test database that records what it sends.
func countedRedis(t *testing.T) (*redis.Client, *testenv.Sent) {
	url, _ := testenv.Redis(t)
	opt, err := redis.ParseURL(url)
	require.NoError(t, err)
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, testenv.WatchRedis(rdb)
}

// took returns what was sent since the last call: each pipeline's length,
// and the commands sent on their own.
func took(s *testenv.Sent) (pipelines []int, alone int) {
	pipelines, alone = s.Pipelines(), s.Alone()
	s.Reset()
	return pipelines, alone
}

// oneThenRefused checks that who gets one request through url and then a
// 429 asking for a wait of retry seconds.
func oneThenRefused(t *testing.T, url, who, retry string) {
	t.Helper()
	st, _ := hit(t, url, who)
	require.Equal(t, http.StatusNoContent, st)
	st, got := hit(t, url, who)
	require.Equal(t, http.StatusTooManyRequests, st)
	require.Equal(t, retry, got)
}

// Redis forgets scripts on a restart or failover. The limiter loads its
// script again and keeps counting; it does not fail open.
func TestRateLimitLoadsItsScriptAfterRedisForgetsIt(t *testing.T) {
	t.Parallel()
	_, rdb := testenv.RedisServer(t)
	url := limited(t, rdb, api.Limit{Scope: "flush", PerSecond: 0.5})
	st, _ := hit(t, url, "a")
	require.Equal(t, http.StatusNoContent, st)
	require.NoError(t, rdb.ScriptFlush(context.Background()).Err())
	st, _ = hit(t, url, "a")
	require.Equal(t, http.StatusTooManyRequests, st)
}

// Without Redis the limiter lets requests through: refusing every write
// because Redis blinked would be worse than a moment unlimited.
func TestRateLimitFailsOpenWithoutRedis(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	url := limited(t, rdb, api.Limit{Scope: "down", PerSecond: 0.5})
	for range 2 {
		st, _ := hit(t, url, "a")
		require.Equal(t, http.StatusNoContent, st)
	}
}

// Concurrent requests on one key never get more than the burst plus what
// the elapsed time earns: the script reads and moves the key's arrival time
// atomically. The control runs the same arithmetic as separate GET and SET
// commands and lets more through.
func TestRateLimitHoldsUnderConcurrentRequests(t *testing.T) {
	t.Parallel()
	const perSecond, clients = 10, 100
	_, rdb := testenv.Redis(t)
	url := limited(t, rdb, api.Limit{Scope: scope(t), PerSecond: perSecond})

	bound := func(elapsed time.Duration) int { return perSecond + int(math.Ceil(elapsed.Seconds()*perSecond)) }
	allowed, elapsed := race(clients, func() bool {
		st, _ := hit(t, url, "crowd")
		return st == http.StatusNoContent
	})
	require.GreaterOrEqual(t, allowed, perSecond)
	require.LessOrEqual(t, allowed, bound(elapsed), "allowed in %s", elapsed)

	key := "hf:control:" + scope(t)
	interval := int64(time.Second / perSecond / time.Microsecond)
	allowed, elapsed = race(clients, func() bool { return racyAllow(t, rdb, key, interval, interval*perSecond) })
	require.Greater(t, allowed, bound(elapsed), "the control should let more through (allowed in %s)", elapsed)
}

// race runs f in n goroutines released together and counts the trues.
func race(n int, f func() bool) (int, time.Duration) {
	var ok atomic.Int64
	began := time.Now()
	testenv.AtOnce(n, func(int) error {
		if f() {
			ok.Add(1)
		}
		return nil
	})
	return int(ok.Load()), time.Since(began)
}

// racyAllow is GCRA without the script: read the arrival time, decide, write
// it back, in separate commands, with a pause where a busy server would
// switch to another request.
func racyAllow(t *testing.T, rdb redis.UniversalClient, key string, interval, tolerance int64) bool {
	ctx := context.Background()
	now := time.Now().UnixMicro()
	tat := now
	if v, err := rdb.Get(ctx, key).Int64(); err == nil {
		tat = max(v, now)
	} else {
		require.ErrorIs(t, err, redis.Nil)
	}
	tat += interval
	if tat-tolerance > now {
		return false
	}
	// Widens the gap between the read and the write so the control's lost
	// updates show: the pause is the race, there is nothing to wait for.
	time.Sleep(time.Millisecond)
	require.NoError(t, rdb.Set(ctx, key, tat, time.Minute).Err())
	return true
}

// In Redis Cluster each limit's key lives in its own slot, so the pipeline
// goes to several masters; the limits still count (the limiter fails open,
// so a refusal is what shows it ran).
func TestRateLimitOnRedisCluster(t *testing.T) {
	t.Parallel()
	_, cc := testenv.RedisCluster(t)
	url := limited(t, cc, api.Limit{Scope: "wide", PerSecond: 1000}, api.Limit{Scope: "narrow", PerSecond: 0.5})
	masters := map[string]bool{}
	for _, k := range []string{"hf:wide:a", "hf:narrow:a"} {
		n, err := cc.MasterForKey(context.Background(), k)
		require.NoError(t, err)
		masters[n.Options().Addr] = true
	}
	require.Len(t, masters, 2, "the two limits' keys should be on different masters")
	oneThenRefused(t, url, "a", "2")
}

// A repeat within the window is turned away with 429 DUPLICATE_REQUEST; the
// claim is given back when the request is refused by a limit or not
// accepted, and it lapses after the window. The claim rides in the limits'
// round trip. The window is a minute, so that no pause of the test's can
// outlast it; a second guard with a 300 ms window shows the lapse.
func TestGuardTurnsAwayARepeatWithinTheWindow(t *testing.T) {
	t.Parallel()
	rdb, rt := countedRedis(t)
	prefix := "hf:dup:" + scope(t) + ":"
	w := api.Window{Duration: time.Minute, Key: func(c *fiber.Ctx) string {
		if k := c.Get("X-Claim"); k != "" {
			return prefix + k
		}
		return ""
	}}
	url := guarded(t, rdb, w, api.Limit{Scope: scope(t), PerSecond: 0.5})
	status := func(headers ...string) string {
		st, retry, code := send(t, url, headers...)
		return fmt.Sprint(st, " ", code, " ", retry)
	}
	short := w
	short.Duration = 300 * time.Millisecond
	shortURL := guarded(t, rdb, short)

	require.Equal(t, "204  ", status("X-Who", "a", "X-Claim", "a"))
	rt.Reset()
	require.Equal(t, "204  ", status("X-Who", "b", "X-Claim", "b"))
	pipelines, alone := took(rt)
	require.Equal(t, []int{3}, pipelines, "one round trip: the limit's script and the claim's SET NX and GET")
	require.Zero(t, alone)

	require.Equal(t, "429 DUPLICATE_REQUEST 60", status("X-Who", "c", "X-Claim", "a"))
	require.Equal(t, "204  ", status("X-Who", "d"), "no claim key: no window")

	// Refused by the limit: RATE_LIMITED, and the claim is given back.
	require.Equal(t, "429 RATE_LIMITED 2", status("X-Who", "b", "X-Claim", "e"))
	require.Zero(t, rdb.Exists(context.Background(), prefix+"e").Val())
	// Not accepted by the handler: the claim is given back too.
	require.Equal(t, "400 INVALID_INPUT ", status("X-Who", "f", "X-Claim", "f", "X-Fail", "1"))
	require.Equal(t, "204  ", status("X-Who", "g", "X-Claim", "f"))

	st, _, _ := send(t, shortURL, "X-Claim", "h")
	require.Equal(t, http.StatusNoContent, st)
	require.Eventually(t, func() bool { return rdb.Exists(context.Background(), prefix+"h").Val() == 0 },
		5*time.Second, 10*time.Millisecond, "the claim did not lapse")
	st, _, code := send(t, shortURL, "X-Claim", "h")
	require.Equal(t, http.StatusNoContent, st, "the window has passed: %s", code)
}

// A repeat within the window that is itself invalid gets the answer its
// first attempt would have got (Window.Valid), not DUPLICATE_REQUEST.
func TestGuardAnswersAnInvalidRepeatForWhatItIs(t *testing.T) {
	t.Parallel()
	_, rdb := testenv.Redis(t)
	key := "hf:dup:" + scope(t)
	w := api.Window{Duration: time.Minute, Key: func(*fiber.Ctx) string { return key },
		Valid: func(c *fiber.Ctx) error {
			if c.Get("X-Fail") != "" {
				return api.InvalidField("x", "told to fail")
			}
			return nil
		}}
	url := guarded(t, rdb, w)
	status := func(headers ...string) string {
		st, _, code := send(t, url, headers...)
		return fmt.Sprint(st, " ", code)
	}
	require.Equal(t, "204 ", status())
	require.Equal(t, "400 INVALID_INPUT", status("X-Fail", "1"))
	require.Equal(t, "429 DUPLICATE_REQUEST", status())
}

// When Redis fails part of the pipeline, the limits fail open but the
// window keeps what Redis said: a claim this request made is given back
// when the request is not accepted, and a repeat Redis saw is refused. The
// hook fails the first command of each pipeline (the limit's script) after
// Redis ran it, as when one shard of a cluster times out.
func TestGuardKeepsTheWindowWhenALimitFails(t *testing.T) {
	t.Parallel()
	rdb, _ := countedRedis(t)
	rdb.AddHook(failFirst)
	prefix := "hf:dup:" + scope(t) + ":"
	w := api.Window{Duration: time.Minute, Key: func(c *fiber.Ctx) string { return prefix + c.Get("X-Claim") }}
	url := guarded(t, rdb, w, api.Limit{Scope: scope(t), PerSecond: 0.5})
	status := func(headers ...string) string {
		st, _, code := send(t, url, headers...)
		return fmt.Sprint(st, " ", code)
	}
	require.Equal(t, "400 INVALID_INPUT", status("X-Who", "a", "X-Claim", "a", "X-Fail", "1"))
	require.Zero(t, rdb.Exists(context.Background(), prefix+"a").Val(), "the failed request gave its claim back")
	require.Equal(t, "204 ", status("X-Who", "a", "X-Claim", "a"), "the limit failed open")
	require.Equal(t, "429 DUPLICATE_REQUEST", status("X-Who", "b", "X-Claim", "a"))
}

// failFirst fails the first command of every pipeline after it ran.
var failFirst = testenv.OnPipeline(func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
	err := next(ctx, cmds)
	if len(cmds) > 1 {
		cmds[0].SetErr(errors.New("i/o timeout"))
	}
	return err
})

// go-redis sends a pipeline again when a reply is lost. The claim carries
// the request's own token and is read back, so the request that made it
// still finds it fresh. The hook runs every pipeline twice.
func TestGuardClaimSurvivesAPipelineSentTwice(t *testing.T) {
	t.Parallel()
	rdb, _ := countedRedis(t)
	rdb.AddHook(sendTwice)
	key := "hf:dup:" + scope(t)
	url := guarded(t, rdb, api.Window{Duration: time.Minute, Key: func(*fiber.Ctx) string { return key }})
	st, _, code := send(t, url)
	require.Equal(t, http.StatusNoContent, st, code)
	st, _, code = send(t, url)
	require.Equal(t, "429 DUPLICATE_REQUEST", fmt.Sprint(st, " ", code))
}

// sendTwice runs every pipeline twice, as a retry after a lost reply would.
var sendTwice = testenv.OnPipeline(func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
	if err := next(ctx, cmds); err != nil {
		return err
	}
	return next(ctx, cmds)
})

// perIP serves GET /api/v1/public/limited behind a per-IP limit of one
// request per second, on a server that trusts the given proxies.
func perIP(t *testing.T, rdb redis.UniversalClient, trusted ...string) string {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := api.New(config.Config{ShutdownTimeout: time.Second, TrustedProxies: trusted}, api.Deps{Redis: rdb, Registry: prometheus.NewRegistry(), Log: log},
		func(s *api.Server) {
			s.V1().Get("/public/limited", api.RateLimit(rdb, log, api.Limit{Scope: scope(t), PerSecond: 1, Key: api.ClientIP}),
				func(c *fiber.Ctx) error { return c.SendStatus(http.StatusNoContent) })
		})
	return testenv.Serve(t, s.Serve) + "/api/v1/public/limited"
}

// Behind a trusted load balancer the per-IP limit counts the clients that
// X-Forwarded-For names; the control, with no proxy trusted, ignores the
// header, so every client behind the balancer shares one limit.
func TestTrustedProxyNamesTheClient(t *testing.T) {
	t.Parallel()
	_, rdb := testenv.Redis(t)
	behind := perIP(t, rdb, "127.0.0.1")
	for _, client := range []string{"203.0.113.7", "203.0.113.8"} {
		st, _, _ := send(t, behind, "X-Forwarded-For", client+", 10.0.0.1")
		require.Equal(t, http.StatusNoContent, st, client)
	}
	st, _, _ := send(t, behind, "X-Forwarded-For", "203.0.113.7")
	require.Equal(t, http.StatusTooManyRequests, st, "the same client again")

	direct := perIP(t, rdb)
	st, _, _ = send(t, direct, "X-Forwarded-For", "203.0.113.9")
	require.Equal(t, http.StatusNoContent, st)
	st, _, _ = send(t, direct, "X-Forwarded-For", "203.0.113.10")
	require.Equal(t, http.StatusTooManyRequests, st, "an untrusted header must not name the client")
}
