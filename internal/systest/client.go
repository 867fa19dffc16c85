package systest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/probe"
	"github.com/holdfast/holdfast/requests"
)

// Client calls the API as one principal.
type Client struct {
	s     *System
	t     testing.TB
	url   string // the API it calls; "" for s.URL
	User  string // the token's sub
	Token string
	HTTP  *http.Client
}

// At returns a copy of c that calls the API at base URL url (StartExtraAPI).
func (c *Client) At(url string) *Client {
	cp := *c
	cp.url = url
	return &cp
}

func (c *Client) base() string {
	if c.url != "" {
		return c.url
	}
	return c.s.URL
}

var transport = &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0}

// Client returns a client acting as sub with role. Every answer it gets is
// checked against the OpenAPI document (see HTTPClient).
func (s *System) Client(sub string, role domain.Role) *Client {
	return &Client{s: s, t: s.t, User: sub, Token: s.Token(sub, role), HTTP: s.HTTPClient(s.t)}
}

// WithT returns a copy of c that reports to t: assertions and OpenAPI
// mismatches fail t instead of the test that started the system (needed
// inside a fuzz target, where the *testing.F may not fail).
func (c *Client) WithT(t testing.TB) *Client {
	cp := *c
	cp.t, cp.HTTP = t, c.s.HTTPClient(t)
	return &cp
}

// Response is a raw API answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v.
func (r Response) JSON(t testing.TB, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.Body, v), "body: %s", r.Body)
}

// Envelope is the error body.
type Envelope struct {
	Error struct {
		Code    string         `json:"code"`
		Message string         `json:"message"`
		TraceID string         `json:"traceId"`
		Meta    map[string]any `json:"meta"`
	} `json:"error"`
}

// ErrorCode returns the envelope's code, failing the test if there is none.
func (r Response) ErrorCode(t testing.TB) string {
	t.Helper()
	var e Envelope
	r.JSON(t, &e)
	require.NotEmpty(t, e.Error.Code, "not an error envelope: %s", r.Body)
	require.NotEmpty(t, e.Error.TraceID)
	require.NotEmpty(t, e.Error.Message)
	return e.Error.Code
}

// Do sends a request; body may be nil, []byte/string (sent as is) or a value
// (sent as JSON). headers are name, value pairs.
func (c *Client) Do(method, path string, body any, headers ...string) Response {
	c.t.Helper()
	r, err := c.TryDo(method, path, body, headers...)
	require.NoError(c.t, err)
	return r
}

// DoPatiently is Do for a client that follows the contract: a 503 with
// Retry-After (a store too slow, as on a busy machine) is sent again once
// that many seconds have passed, up to ten times — unless it names a
// Location (a write whose storing is in doubt): that is read until it
// tells, and a write found stored is answered as its 202 would have been.
// For a test's setup, whose point is not how the API answers a crowd.
func (c *Client) DoPatiently(method, path string, body any, headers ...string) Response {
	c.t.Helper()
	for try := 1; ; try++ {
		r := c.Do(method, path, body, headers...)
		if loc := r.Header.Get("Location"); r.Status == http.StatusServiceUnavailable && loc != "" {
			if stored, ok := c.settled(loc); ok {
				return stored
			}
		}
		if try == 10 || !r.FollowRetryAfter() {
			return r
		}
	}
}

// settled reads the request at loc until it is found: stored (ok, with
// the 202 its write would have got) or not (NOT_STORED).
func (c *Client) settled(loc string) (Response, bool) {
	c.t.Helper()
	for {
		r := c.Do("GET", loc, nil)
		if r.Status != http.StatusOK {
			require.True(c.t, r.FollowRetryAfter(), "GET %s: %d %s", loc, r.Status, r.Body)
			continue
		}
		var v requests.View
		r.JSON(c.t, &v)
		if v.Error != nil && v.Error.Code == domain.CodeNotStored {
			return Response{}, false
		}
		b, err := json.Marshal(Accepted{RequestID: v.RequestID, Status: string(v.Status), StatusURL: loc})
		require.NoError(c.t, err)
		return Response{Status: http.StatusAccepted, Header: http.Header{"Location": {loc}}, Body: b}, true
	}
}

// FollowRetryAfter reports whether r is a 503 with Retry-After and, if it
// is, waits as long as it asks, as a client following the contract does
// before it sends the request again: the server asked for this wait, and
// sooner breaks the contract.
func (r Response) FollowRetryAfter() bool {
	wait, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if r.Status != http.StatusServiceUnavailable || err != nil {
		return false
	}
	time.Sleep(time.Duration(wait) * time.Second)
	return true
}

// TryDo is Do returning transport errors instead of failing.
func (c *Client) TryDo(method, path string, body any, headers ...string) (Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return Response{}, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, c.base()+path, rd)
	if err != nil {
		return Response{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, err
}

// Accepted is the body of a 202.
type Accepted struct {
	RequestID string `json:"requestId"`
	Status    string `json:"status"`
	StatusURL string `json:"statusUrl"`
}

// Probe submits a probe write and returns its request id (asserting 202,
// or 200 for an Idempotency-Key replay of a finished one, whose body is the
// outcome, with the same requestId).
func (c *Client) Probe(p probe.Payload, headers ...string) string {
	c.t.Helper()
	r := c.Do("POST", "/api/v1/probe", p, headers...)
	require.Contains(c.t, []int{http.StatusAccepted, http.StatusOK}, r.Status, "body: %s", r.Body)
	var a Accepted
	r.JSON(c.t, &a)
	require.Equal(c.t, "/api/v1/requests/"+a.RequestID, r.Header.Get("Location"))
	return a.RequestID
}

// Wait long-polls a request until it is terminal.
func (c *Client) Wait(id string, timeout time.Duration) requests.View {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r := c.Do("GET", "/api/v1/requests/"+id+"?wait=10s", nil)
		require.Equal(c.t, http.StatusOK, r.Status, "body: %s", r.Body)
		var v requests.View
		r.JSON(c.t, &v)
		if v.Status.Terminal() {
			return v
		}
		require.True(c.t, time.Now().Before(deadline), "request %s still %s after %s", id, v.Status, timeout)
	}
}

// WaitAllTerminal waits until no request is open and returns how long it took.
func (s *System) WaitAllTerminal(timeout time.Duration) time.Duration {
	s.t.Helper()
	start := time.Now()
	var open int
	for {
		require.NoError(s.t, s.Pool.QueryRow(context.Background(),
			`SELECT count(*) FROM requests WHERE status IN ('queued', 'processing')`).Scan(&open))
		if open == 0 {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			s.t.Fatalf("%d requests still open after %s", open, timeout)
		}
		// A poll's pace: Postgres tells no one when the last request ends.
		time.Sleep(50 * time.Millisecond)
	}
}

// Statuses counts requests by status.
func (s *System) Statuses() map[domain.Status]int {
	rows, err := s.Pool.Query(context.Background(), `SELECT status, count(*) FROM requests GROUP BY status`)
	require.NoError(s.t, err)
	defer rows.Close()
	out := map[domain.Status]int{}
	for rows.Next() {
		var st domain.Status
		var n int
		require.NoError(s.t, rows.Scan(&st, &n))
		out[st] = n
	}
	require.NoError(s.t, rows.Err())
	return out
}
