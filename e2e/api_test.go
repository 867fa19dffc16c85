package e2e

import (
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/probe"
	"github.com/holdfast/holdfast/requests"
)

func signed(t *testing.T, secret string, method jwt.SigningMethod, claims jwt.MapClaims) string {
	tok, err := jwt.NewWithClaims(method, claims).SignedString([]byte(secret))
	require.NoError(t, err)
	return tok
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{})
	exp := time.Now().Add(time.Hour).Unix()
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"sub": "u", "role": "user", "exp": exp}).
		SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	cases := map[string]string{
		"no token":        "",
		"not a jwt":       "garbage",
		"wrong secret":    signed(t, "another-secret-0123456789", jwt.SigningMethodHS256, jwt.MapClaims{"sub": "u", "role": "user", "exp": exp}),
		"expired":         signed(t, testenv.Secret, jwt.SigningMethodHS256, jwt.MapClaims{"sub": "u", "role": "user", "exp": time.Now().Add(-time.Hour).Unix()}),
		"no exp":          signed(t, testenv.Secret, jwt.SigningMethodHS256, jwt.MapClaims{"sub": "u", "role": "user"}),
		"no sub":          signed(t, testenv.Secret, jwt.SigningMethodHS256, jwt.MapClaims{"role": "user", "exp": exp}),
		"unknown role":    signed(t, testenv.Secret, jwt.SigningMethodHS256, jwt.MapClaims{"sub": "u", "role": "root", "exp": exp}),
		"alg none":        none,
		"other algorithm": signed(t, testenv.Secret, jwt.SigningMethodHS512, jwt.MapClaims{"sub": "u", "role": "user", "exp": exp}),
	}
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) {
			c := s.Client("u", domain.RoleUser)
			c.Token = tok
			for _, r := range []systest.Response{
				c.Do("POST", "/api/v1/probe", probe.Payload{Keys: []string{"x"}}),
				c.Do("GET", "/api/v1/requests/00000000-0000-0000-0000-000000000000", nil),
			} {
				require.Equal(t, http.StatusUnauthorized, r.Status, "body: %s", r.Body)
				require.Equal(t, domain.CodeUnauthenticated, r.ErrorCode(t))
			}
		})
	}
	var n int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM requests`).Scan(&n))
	require.Zero(t, n, "nothing unauthenticated was accepted")
}

// Asynqmon at /monitoring needs an admin, by bearer token or as the password
// of Basic auth (what a browser can send).
func TestMonitoringNeedsAdmin(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{})
	anon := s.Client("x", domain.RoleUser)
	anon.Token = ""
	r := anon.Do("GET", "/monitoring/", nil)
	require.Equal(t, http.StatusUnauthorized, r.Status)
	require.Contains(t, r.Header.Get("WWW-Authenticate"), "Basic")
	for _, role := range []domain.Role{domain.RoleUser, domain.RoleStaff} {
		r := s.Client("x", role).Do("GET", "/monitoring/api/queues", nil)
		require.Equal(t, http.StatusForbidden, r.Status)
		require.Equal(t, domain.CodeForbidden, r.ErrorCode(t))
	}
	admin := s.Client("root", domain.RoleAdmin)
	r = admin.Do("GET", "/monitoring/api/queues", nil)
	require.Equal(t, http.StatusOK, r.Status, "body: %s", r.Body)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:"+admin.Token))
	anon.Token = ""
	r = anon.Do("GET", "/monitoring/", nil, "Authorization", basic)
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, string(r.Body), "<html")
}

// MONITORING_ADDR moves Asynqmon off the public address to a port of its
// own, still to admins only, or turns it off; the public address then
// answers 404 at /monitoring (the control is TestMonitoringNeedsAdmin,
// where it is served there).
func TestMonitoringMovesOrTurnsOff(t *testing.T) {
	t.Parallel()
	own := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	for _, addr := range []string{own, "off"} {
		t.Run(addr, func(t *testing.T) {
			t.Parallel()
			s := systest.Start(t, systest.Options{Overrides: []string{"MONITORING_ADDR", addr}})
			admin := s.Client("root", domain.RoleAdmin)
			r := admin.Do("GET", "/monitoring/api/queues", nil)
			require.Equal(t, http.StatusNotFound, r.Status, "not on the public address")
			if addr == "off" {
				return
			}
			private := admin.At("http://" + addr)
			r = private.Do("GET", "/monitoring/api/queues", nil)
			require.Equal(t, http.StatusOK, r.Status, "body: %s", r.Body)
			r = s.Client("x", domain.RoleUser).At("http://"+addr).Do("GET", "/monitoring/api/queues", nil)
			require.Equal(t, http.StatusForbidden, r.Status, "admins only there too")
			require.Equal(t, domain.CodeForbidden, r.ErrorCode(t))
		})
	}
}

// A replay of a finished write (its Idempotency-Key again, no Prefer)
// answers 200 with the outcome, the error of a rejected one included, as
// GET shows it: before, it answered 202 with "status":"rejected" and
// neither error nor result, and the client had to poll to learn why.
func TestAReplayOfAFinishedWriteAnswersItsOutcome(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1})
	alice := s.Client("alice", domain.RoleUser)
	done := alice.Wait(alice.Probe(probe.Payload{Keys: []string{"full"}}), time.Minute)
	require.Equal(t, domain.StatusSucceeded, done.Status)
	body := probe.Payload{Keys: []string{"full"}, Limit: 1}
	id := alice.Probe(body, "Idempotency-Key", "over-the-limit")
	polled := alice.Wait(id, time.Minute)
	require.Equal(t, domain.StatusRejected, polled.Status)

	r := alice.Do("POST", "/api/v1/probe", body, "Idempotency-Key", "over-the-limit")
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "/api/v1/requests/"+id, r.Header.Get("Location"))
	var replayed requests.View
	r.JSON(t, &replayed)
	require.Equal(t, polled, replayed, "the outcome, as GET shows it")
	require.NotNil(t, replayed.Error, "the reason it was rejected")
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{})
	alice, bob := s.Client("alice", domain.RoleUser), s.Client("bob", domain.RoleUser)
	body := probe.Payload{Keys: []string{"idem"}}

	first := alice.Probe(body, "Idempotency-Key", "order-1")
	r := alice.Do("POST", "/api/v1/probe", body, "Idempotency-Key", "order-1")
	require.Equal(t, http.StatusAccepted, r.Status)
	require.Equal(t, "true", r.Header.Get("Idempotent-Replayed"))
	var again systest.Accepted
	r.JSON(t, &again)
	require.Equal(t, first, again.RequestID, "same key, same body: same request")

	// The same body with its fields reordered is the same request.
	r = alice.Do("POST", "/api/v1/probe", `{ "keys" : ["idem"] }`, "Idempotency-Key", "order-1")
	require.Equal(t, http.StatusAccepted, r.Status)

	r = alice.Do("POST", "/api/v1/probe", probe.Payload{Keys: []string{"other"}}, "Idempotency-Key", "order-1")
	require.Equal(t, http.StatusUnprocessableEntity, r.Status)
	require.Equal(t, domain.CodeIdempotencyKeyReused, r.ErrorCode(t))

	// Keys are scoped to the caller.
	require.NotEqual(t, first, bob.Probe(body, "Idempotency-Key", "order-1"))
	// No key, no deduplication.
	require.NotEqual(t, alice.Probe(body), alice.Probe(body))

	r = alice.Do("POST", "/api/v1/probe", body, "Idempotency-Key", strings.Repeat("k", 256))
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, domain.CodeInvalidInput, r.ErrorCode(t))

	var n int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM requests`).Scan(&n))
	require.Equal(t, 4, n)

	// A replay after the request finished returns it with its outcome
	// (TestAReplayOfAFinishedWriteAnswersItsOutcome).
	s.StartWorker("w")
	alice.Wait(first, 20*time.Second)
	r = alice.Do("POST", "/api/v1/probe", body, "Idempotency-Key", "order-1")
	require.Equal(t, http.StatusOK, r.Status)
	var done requests.View
	r.JSON(t, &done)
	require.Equal(t, first, done.RequestID)
	require.Equal(t, domain.StatusSucceeded, done.Status)
}

// One Idempotency-Key sent many times at once, through two APIs whose group
// commits batch it with itself and each other's: it is stored once, and
// every caller gets that request, all but one as a replay.
func TestIdempotencyKeyRacedAcrossTwoAPIs(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{})
	apis := []*systest.Client{s.Client("racer", domain.RoleUser)}
	apis = append(apis, apis[0].At(s.StartExtraAPI()))
	body := probe.Payload{Keys: []string{"raced"}}
	const each = 40
	answers := make([]systest.Response, 2*each)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = apis[i%2].Do("POST", "/api/v1/probe", body, "Idempotency-Key", "raced-1")
		}()
	}
	wg.Wait()
	var first systest.Accepted
	answers[0].JSON(t, &first)
	replayed := 0
	for _, r := range answers {
		require.Equal(t, http.StatusAccepted, r.Status, "body: %s", r.Body)
		var a systest.Accepted
		r.JSON(t, &a)
		require.Equal(t, first.RequestID, a.RequestID)
		if r.Header.Get("Idempotent-Replayed") == "true" {
			replayed++
		}
	}
	require.Equal(t, len(answers)-1, replayed)
	var n int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM requests WHERE idem_key = 'raced-1'`).Scan(&n))
	require.Equal(t, 1, n)
}

func TestBadInputGets4xxEnvelopes(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Overrides: []string{"BODY_LIMIT", "2048"}})
	c := s.Client("u", domain.RoleUser)
	cases := []struct {
		name   string
		body   any
		status int
		code   string
	}{
		{"malformed", `{"keys": [`, 400, domain.CodeInvalidInput},
		{"not an object", `[1,2]`, 400, domain.CodeInvalidInput},
		{"wrong type", `{"keys": "a"}`, 400, domain.CodeInvalidInput},
		{"number out of range", `{"keys": ["a"], "limit": 1e40}`, 400, domain.CodeInvalidInput},
		{"negative", `{"keys": ["a"], "limit": -1}`, 400, domain.CodeInvalidInput},
		{"unknown field", `{"keys": ["a"], "qty": 2}`, 400, domain.CodeInvalidInput},
		{"trailing data", `{"keys": ["a"]} {}`, 400, domain.CodeInvalidInput},
		{"bad key name", `{"keys": ["A B"]}`, 400, domain.CodeInvalidInput},
		{"too many keys", `{"keys": ["a","b","c","d","e"]}`, 400, domain.CodeInvalidInput},
		{"empty", ``, 400, domain.CodeInvalidInput},
		{"null", `null`, 400, domain.CodeInvalidInput},
		{"too large", `{"keys": ["` + strings.Repeat("a", 4096) + `"]}`, 413, domain.CodePayloadTooLarge},
	}
	for _, tc := range cases {
		r := c.Do("POST", "/api/v1/probe", tc.body)
		require.Equal(t, tc.status, r.Status, "%s: %s", tc.name, r.Body)
		require.Equal(t, tc.code, r.ErrorCode(t), tc.name)
	}
	r := c.Do("POST", "/api/v1/probe", nil, "Content-Type", "text/plain")
	require.Equal(t, http.StatusBadRequest, r.Status, "an empty body is {} whatever its type")
	raw, err := c.TryDo("POST", "/api/v1/probe", []byte(`keys=a`), "Content-Type", "application/x-www-form-urlencoded")
	require.NoError(t, err)
	require.Equal(t, http.StatusUnsupportedMediaType, raw.Status)
	require.Equal(t, domain.CodeUnsupportedMedia, raw.ErrorCode(t))

	require.Equal(t, http.StatusNotFound, c.Do("GET", "/api/v1/nothing-here", nil).Status)
	r = c.Do("DELETE", "/api/v1/probe", nil)
	require.Contains(t, []int{404, 405}, r.Status)
	r.ErrorCode(t)

	var n int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM requests`).Scan(&n))
	require.Zero(t, n, "no bad input was accepted")
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	redisURL, rdb := testenv.RedisServer(t)
	s := systest.Start(t, systest.Options{RedisURL: redisURL})
	w := s.StartWorker("w")
	anon := s.Client("x", domain.RoleUser)
	anon.Token = ""
	require.Equal(t, http.StatusOK, anon.Do("GET", "/healthz", nil).Status)
	require.Equal(t, http.StatusOK, anon.Do("GET", "/readyz", nil).Status)
	u := s.Client("u", domain.RoleUser)
	u.Wait(u.Probe(probe.Payload{Keys: []string{"m"}}), 20*time.Second)
	m := anon.Do("GET", "/metrics", nil)
	require.Equal(t, http.StatusOK, m.Status)
	require.Contains(t, string(m.Body), "holdfast_requests_accepted_total")
	require.Contains(t, string(m.Body), "asynq_queue_size")

	wm, err := http.Get(w.URL + "/metrics")
	require.NoError(t, err)
	workerMetrics, err := io.ReadAll(wm.Body)
	wm.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, wm.StatusCode)
	require.Contains(t, string(workerMetrics), "holdfast_keyed_batch_size")
	require.NotContains(t, string(workerMetrics), "asynq_queue_size", "Asynq's queue metrics have one collector, in the API")

	// Redis goes away: not ready (503 envelope), still live.
	_ = rdb.Shutdown(t.Context()).Err() // the server closes the connection as it goes
	r := anon.Do("GET", "/readyz", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.Status)
	require.Equal(t, domain.CodeUnavailable, r.ErrorCode(t))
	require.Equal(t, http.StatusOK, anon.Do("GET", "/healthz", nil).Status)
	wr, err := http.Get(w.URL + "/readyz")
	require.NoError(t, err)
	wr.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, wr.StatusCode)
}

// METRICS_ADDR moves the API's /metrics off its public address.
func TestMetricsOnTheirOwnAddress(t *testing.T) {
	t.Parallel()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	s := systest.Start(t, systest.Options{Overrides: []string{"METRICS_ADDR", addr}})
	public, err := http.Get(s.URL + "/metrics")
	require.NoError(t, err)
	public.Body.Close()
	require.Equal(t, http.StatusNotFound, public.StatusCode, "metrics still on the public address")
	private, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	b, err := io.ReadAll(private.Body)
	private.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, private.StatusCode)
	require.Contains(t, string(b), "holdfast_requests_oldest_open_seconds")
}
