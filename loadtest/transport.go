package loadtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// fastTransport is the load tool's HTTP transport: an http.RoundTripper
// over fasthttp's client. The tool shares two cores with everything it
// measures, and net/http's transport runs two goroutines per connection
// and hands every request and answer between them; fasthttp's client does
// an exchange on one goroutine. Every HTTP run of the tool, the
// synchronous designs' as much as holdfast's, goes through it, so a run's
// ratios compare servers, not client stacks.
//
// It serves what package client and the baseline scenarios send: small
// bodies read whole, answers read whole. An exchange ends at its request's
// deadline or when its context ends, as with net/http, and a request is
// never sent twice: a write the API may have accepted is not resent on a
// broken connection (the tool sends no Idempotency-Key). A context that ends
// closes every connection of the transport: each run has a transport of its
// own and hands it the run's context only, which ends when the run does.
type fastTransport struct {
	c *fasthttp.Client
	// maxWait bounds an exchange whose context has no deadline.
	maxWait time.Duration

	mu    sync.Mutex
	conns map[net.Conn]struct{} // open connections, closed when a context ends
}

func newFastTransport() *fastTransport {
	t := &fastTransport{maxWait: 2 * time.Minute, conns: map[net.Conn]struct{}{}}
	t.c = &fasthttp.Client{
		Dial:            t.dial,
		MaxConnsPerHost: 4096,
		// Shorter than the API's idle timeout (two minutes), so a
		// connection is not reused just as the server closes it.
		MaxIdleConnDuration:           time.Minute,
		MaxIdemponentCallAttempts:     1,
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
	}
	return t
}

// dial opens a connection the transport can close when a context ends.
func (t *fastTransport) dial(addr string) (net.Conn, error) {
	c, err := fasthttp.Dial(addr)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, t: t}
	t.mu.Lock()
	t.conns[tc] = struct{}{}
	t.mu.Unlock()
	return tc, nil
}

// closeAll ends every exchange in flight: its connection is closed under
// it. A context of the tool ends when the run does (its deadline, or the
// user's interrupt), so the exchanges of other contexts end with it.
func (t *fastTransport) closeAll() {
	t.mu.Lock()
	conns := slices.Collect(maps.Keys(t.conns))
	t.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

type trackedConn struct {
	net.Conn
	t    *fastTransport
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
	})
	return c.Conn.Close()
}

// RoundTrip sends r and returns its answer with the body in memory.
func (t *fastTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(r.Method)
	req.SetRequestURI(r.URL.String())
	for name, values := range r.Header {
		for _, v := range values {
			req.Header.Add(name, v)
		}
	}
	if r.Body != nil {
		body, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return nil, err
		}
		req.SetBodyRaw(body)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(t.maxWait)
	}
	closed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { t.closeAll(); close(closed) })
	err := t.c.DoDeadline(req, resp, deadline)
	if !stop() {
		// closeAll has started: let it finish, or it could close the
		// connection of the caller's next exchange under it.
		<-closed
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr // as net/http reports a context that ended
		}
		if ok && errors.Is(err, fasthttp.ErrTimeout) {
			return nil, context.DeadlineExceeded
		}
		return nil, err
	}
	h := make(http.Header)
	for k, v := range resp.Header.All() {
		h.Add(string(k), string(v))
	}
	body := bytes.Clone(resp.Body())
	code := resp.StatusCode()
	return &http.Response{
		Status:        strconv.Itoa(code) + " " + http.StatusText(code),
		StatusCode:    code,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       r,
	}, nil
}
