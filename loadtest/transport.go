package loadtest

import (
	"bytes"
	"io"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"
)

// fastTransport is the load tool's HTTP transport: an http.RoundTripper
// over fasthttp's client. The tool shares two cores with everything it
// measures, and net/http's transport runs two goroutines per connection
// and hands every request and answer between them; fasthttp's client does
// an exchange on the caller's goroutine. Every HTTP run of the tool, the
// floors and the baselines as much as holdfast, goes through it, so a run's
// ratios compare servers, not client stacks.
//
// It serves what package client and the baseline scenarios send: small
// bodies read whole, answers read whole. A request's deadline comes from
// its context; cancelling the context does not cut an exchange short,
// which ends within its deadline or the long poll's wait.
type fastTransport struct {
	c *fasthttp.Client
	// maxWait bounds an exchange whose context has no deadline.
	maxWait time.Duration
}

func newFastTransport() *fastTransport {
	return &fastTransport{
		c: &fasthttp.Client{
			MaxConnsPerHost:               4096,
			MaxIdleConnDuration:           time.Minute,
			NoDefaultUserAgentHeader:      true,
			DisableHeaderNamesNormalizing: true,
			DisablePathNormalizing:        true,
		},
		maxWait: 2 * time.Minute,
	}
}

// RoundTrip sends r and returns its answer with the body in memory.
func (t *fastTransport) RoundTrip(r *http.Request) (*http.Response, error) {
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
	deadline, ok := r.Context().Deadline()
	if !ok {
		deadline = time.Now().Add(t.maxWait)
	}
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	if err := t.c.DoDeadline(req, resp, deadline); err != nil {
		return nil, err
	}
	h := make(http.Header)
	resp.Header.VisitAll(func(k, v []byte) { h.Add(string(k), string(v)) })
	body := bytes.Clone(resp.Body())
	return &http.Response{
		Status:        http.StatusText(resp.StatusCode()),
		StatusCode:    resp.StatusCode(),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       r,
	}, nil
}
