// Package client is a small Go client for the holdfast HTTP API.
//
// Every write in holdfast is asynchronous: the API makes it durable and
// answers 202 with a request id, and a worker applies it later. A caller
// submits a write, then waits for its outcome:
//
//	c := client.New("http://127.0.0.1:8080", token)
//	acc, err := c.FCFS(ctx, eventID, "+821012345678")
//	if err != nil { ... }                  // *client.Error: 4xx/5xx from the API (bad input, 429, ...)
//	out, err := c.Await(ctx, acc)          // long-polls until the request is terminal
//	if err != nil { ... }                  // transport failure, or ctx ended first
//	var seat client.FCFSResult
//	if err := out.Decode(&seat); err != nil {
//		// out.Err() is a *client.Error carrying the business code,
//		// e.g. client.IsCode(err, CodeSoldOut)
//	}
//
// With PreferWait set, a write asks the API to hold its answer until the
// outcome is known (Prefer: wait=N, RFC 7240): a write that finishes in time
// is one HTTP exchange, and Await returns its outcome without another.
//
// A Client is safe for concurrent use. WithToken returns a copy acting as
// another principal that shares the connection pool, so one process can drive
// many users cheaply.
//
// The package declares its own result types instead of importing the
// server's packages, so a program that imports it pulls in no database,
// queue or HTTP-server dependencies.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client calls one holdfast API as one principal.
type Client struct {
	base  string
	token string
	http  *http.Client
	// PollWait is how long one long-poll of Wait asks the API to hold the
	// answer (the API's maximum is 30 s by default).
	PollWait time.Duration
	// PreferWait, when 1 s or more, is how long a write asks the API to
	// hold its answer for the outcome (whole seconds; 0 asks for none).
	PreferWait time.Duration
}

// New returns a client for the API at baseURL (for example
// "http://127.0.0.1:8080") authenticating with the JWT token ("" for public
// endpoints). Its connection pool keeps up to 1,024 idle connections, enough
// for a load generator.
func New(baseURL, token string) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 1024
	tr.MaxIdleConnsPerHost = 1024
	return NewWithHTTP(baseURL, token, &http.Client{Transport: tr})
}

// NewWithHTTP is New with the caller's *http.Client.
func NewWithHTTP(baseURL, token string, hc *http.Client) *Client {
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, http: hc, PollWait: 10 * time.Second}
}

// WithToken returns a copy of c acting with token; the copy shares c's
// connections.
func (c *Client) WithToken(token string) *Client {
	cp := *c
	cp.token = token
	return &cp
}

// Error is an error the API answered with: the envelope of a synchronous
// 4xx/5xx, or the error of a request that ended rejected or failed.
type Error struct {
	HTTPStatus int            `json:"httpStatus"`
	Code       string         `json:"code"`
	Message    string         `json:"message"`
	TraceID    string         `json:"traceId,omitempty"`
	Meta       map[string]any `json:"meta,omitempty"`
	// RetryAfter is the API's Retry-After on a 429 or 503, else zero.
	RetryAfter time.Duration `json:"-"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("holdfast: %d %s: %s", e.HTTPStatus, e.Code, e.Message)
}

// IsCode reports whether err is an *Error with the given code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// Request statuses (SPEC §2).
const (
	StatusQueued     = "queued"
	StatusProcessing = "processing"
	StatusSucceeded  = "succeeded"
	StatusRejected   = "rejected"
	StatusFailed     = "failed"
)

// Accepted is the API's answer to a write: 202 with the request's id.
type Accepted struct {
	RequestID string `json:"requestId"`
	Status    string `json:"status"`
	StatusURL string `json:"statusUrl"`
	// Replayed is true when an Idempotency-Key returned an earlier request.
	Replayed bool `json:"-"`
	// Outcome is the request's outcome when the API answered with it: the
	// write was sent with PreferWait and finished in time (200).
	Outcome *Outcome `json:"-"`
}

// Outcome is a request's state as GET /api/v1/requests/{id} shows it.
type Outcome struct {
	RequestID   string          `json:"requestId"`
	Type        string          `json:"type"`
	Status      string          `json:"status"`
	AcceptedAt  time.Time       `json:"acceptedAt"`
	CompletedAt *time.Time      `json:"completedAt"`
	Result      json.RawMessage `json:"result"`
	Problem     *Error          `json:"error"`
}

// Terminal reports whether the request is finished.
func (o *Outcome) Terminal() bool {
	return o.Status == StatusSucceeded || o.Status == StatusRejected || o.Status == StatusFailed
}

// Err is nil for a succeeded request and the request's *Error otherwise (a
// request not yet terminal gives an error too).
func (o *Outcome) Err() error {
	switch {
	case o.Status == StatusSucceeded:
		return nil
	case o.Problem != nil:
		return o.Problem
	default:
		return fmt.Errorf("holdfast: request %s is %s", o.RequestID, o.Status)
	}
}

// Decode stores a succeeded request's result in v, or returns Err.
func (o *Outcome) Decode(v any) error {
	if err := o.Err(); err != nil {
		return err
	}
	return json.Unmarshal(o.Result, v)
}

// WriteOption adjusts one write.
type WriteOption func(h http.Header)

// IdempotencyKey makes a write safe to retry: the same key and body return
// the same request.
func IdempotencyKey(k string) WriteOption {
	return func(h http.Header) { h.Set("Idempotency-Key", k) }
}

// Header sets an extra request header, such as X-Entry-Token.
func Header(name, value string) WriteOption {
	return func(h http.Header) { h.Set(name, value) }
}

// Submit sends a write (body may be nil) and returns the 202's request id,
// or, with PreferWait, the 200's outcome too. Any other answer is an *Error.
func (c *Client) Submit(ctx context.Context, method, path string, body any, opts ...WriteOption) (Accepted, error) {
	var a Accepted
	if s := int(c.PreferWait / time.Second); s > 0 {
		opts = append(opts, Header("Prefer", "wait="+strconv.Itoa(s)))
	}
	resp, err := c.send(ctx, method, path, body, opts)
	if err != nil {
		return a, err
	}
	defer drain(resp)
	switch resp.StatusCode {
	case http.StatusAccepted:
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			return a, fmt.Errorf("holdfast: decode 202: %w", err)
		}
	case http.StatusOK:
		var o Outcome
		if err := json.NewDecoder(resp.Body).Decode(&o); err != nil {
			return a, fmt.Errorf("holdfast: decode 200: %w", err)
		}
		a = Accepted{RequestID: o.RequestID, Status: o.Status, StatusURL: resp.Header.Get("Location"), Outcome: &o}
	default:
		return a, readError(resp)
	}
	a.Replayed = resp.Header.Get("Idempotent-Replayed") == "true"
	return a, nil
}

// Await returns the outcome of an accepted write: the one its answer
// carried, else what Wait long-polls.
func (c *Client) Await(ctx context.Context, a Accepted) (Outcome, error) {
	if a.Outcome != nil && a.Outcome.Terminal() {
		return *a.Outcome, nil
	}
	return c.Wait(ctx, a.RequestID)
}

// Status reads a request's state once, without waiting.
func (c *Client) Status(ctx context.Context, requestID string) (Outcome, error) {
	return c.status(ctx, requestID, 0)
}

// Wait long-polls a request until it is terminal or ctx ends. A transport
// error or ctx's error is returned as is; the business result is in the
// Outcome (see Outcome.Err).
func (c *Client) Wait(ctx context.Context, requestID string) (Outcome, error) {
	for {
		o, err := c.status(ctx, requestID, c.PollWait)
		if err != nil || o.Terminal() {
			return o, err
		}
		if err := ctx.Err(); err != nil {
			return o, err
		}
	}
}

func (c *Client) status(ctx context.Context, requestID string, wait time.Duration) (Outcome, error) {
	var o Outcome
	path := "/api/v1/requests/" + url.PathEscape(requestID)
	if wait > 0 {
		path += "?wait=" + wait.String()
	}
	err := c.Do(ctx, http.MethodGet, path, nil, &o)
	return o, err
}

// Do sends a synchronous call and decodes a 2xx body into out (out may be
// nil). Any other answer is an *Error.
func (c *Client) Do(ctx context.Context, method, path string, body, out any, opts ...WriteOption) error {
	resp, err := c.send(ctx, method, path, body, opts)
	if err != nil {
		return err
	}
	defer drain(resp)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return readError(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("holdfast: decode %s %s: %w", method, path, err)
	}
	return nil
}

func (c *Client) send(ctx context.Context, method, path string, body any, opts []WriteOption) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("holdfast: encode body: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for _, o := range opts {
		o(req.Header)
	}
	return c.http.Do(req)
}

// drain reads what is left of a body so the connection can be reused.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
}

// readError turns a non-2xx answer into an *Error. A body that is not the
// error envelope (a proxy's page, say) still gives the status.
func readError(resp *http.Response) error {
	var env struct {
		Error *Error `json:"error"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &Error{HTTPStatus: resp.StatusCode, Code: "HTTP_" + strconv.Itoa(resp.StatusCode), Message: strings.TrimSpace(string(b))}
	if json.Unmarshal(b, &env) == nil && env.Error != nil && env.Error.Code != "" {
		env.Error.HTTPStatus = resp.StatusCode
		e = env.Error
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}
