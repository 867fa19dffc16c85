package systest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Balancer stands in front of API processes as a Kubernetes Service (and
// the ingress before it) does: each request goes to the next backend,
// round robin, among those whose readiness checks (GET /readyz every
// CheckEvery, as a kubelet's probe) last said ready; a backend leaves the
// rotation after FailureThreshold checks in a row that were not 200, as an
// endpoint does. It keeps connections of its own to each backend, so an
// API's Connection: close ends the balancer's connection, not the
// client's. Every exchange with a backend that fails (connection refused,
// reset, EOF) is recorded as a failure and answered 502: it never retries
// on a client's behalf, and a request the transport sent again on a new
// connection, after the one it chose had failed, is recorded as a failure
// too.
type Balancer struct {
	URL string

	t         testing.TB
	transport *http.Transport // to the backends, with keep-alive
	probe     *http.Client    // readiness checks, a new connection each

	mu       sync.Mutex
	backends []*backend
	next     int
	failures []string
	changed  chan struct{} // closed, and replaced, on any change a Wait… waits for
}

// Readiness checking, as a kubelet's probe with periodSeconds and
// failureThreshold (its default, 3).
const (
	CheckEvery       = 100 * time.Millisecond
	FailureThreshold = 3
	checkTimeout     = 2 * time.Second
)

type backend struct {
	url  *url.URL
	quit chan struct{} // ends its checks

	ready  bool // in the rotation
	seen   bool // what its checks say
	misses int  // checks in a row that were not 200
	held   bool // kept in the rotation whatever its checks say (Hold)
	sent   int  // requests sent to it
	mark   int  // sent when Mark was called
}

// NewBalancer starts a balancer with no backends; it stops when the test
// ends.
func NewBalancer(t testing.TB) *Balancer {
	b := &Balancer{
		t:         t,
		transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute},
		probe:     &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: checkTimeout},
		changed:   make(chan struct{}),
	}
	srv := httptest.NewServer(b)
	b.URL = srv.URL
	t.Cleanup(func() {
		srv.Close()
		b.mu.Lock()
		for _, be := range b.backends {
			close(be.quit)
		}
		b.backends = nil
		b.mu.Unlock()
		b.transport.CloseIdleConnections()
	})
	return b
}

// ServeHTTP sends r to the next ready backend.
func (b *Balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	be := b.pick()
	if be == nil {
		b.fail(fmt.Sprintf("%s %s: no ready backend", r.Method, r.URL))
		http.Error(w, "no ready backend", http.StatusBadGateway)
		return
	}
	var conns atomic.Int32
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { conns.Add(1) }}
	r = r.WithContext(httptrace.WithClientTrace(r.Context(), trace))
	failed := false
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(be.url); pr.Out.Host = pr.In.Host },
		Transport: b.transport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			failed = true
			b.fail(fmt.Sprintf("%s %s to %s: %v", r.Method, r.URL.RequestURI(), be.url.Host, err))
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	proxy.ServeHTTP(w, r)
	if n := conns.Load(); n > 1 && !failed {
		b.fail(fmt.Sprintf("%s %s to %s: sent again on a new connection after its first one failed (%d connections)",
			r.Method, r.URL.RequestURI(), be.url.Host, n))
	}
}

// pick is the next ready backend, round robin; nil when none is ready.
func (b *Balancer) pick() *backend {
	b.mu.Lock()
	defer b.mu.Unlock()
	for range b.backends {
		be := b.backends[b.next%len(b.backends)]
		b.next++
		if be.ready {
			be.sent++
			b.notify()
			return be
		}
	}
	return nil
}

func (b *Balancer) fail(what string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures = append(b.failures, what)
}

// notify wakes every Wait…; b.mu is held.
func (b *Balancer) notify() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// Add puts the API at base URL u behind the balancer; it enters the
// rotation once a check finds it ready.
func (b *Balancer) Add(u string) {
	parsed, err := url.Parse(u)
	require.NoError(b.t, err)
	be := &backend{url: parsed, quit: make(chan struct{})}
	b.mu.Lock()
	b.backends = append(b.backends, be)
	b.mu.Unlock()
	go b.check(be)
}

// check probes be's /readyz every CheckEvery until it is removed.
func (b *Balancer) check(be *backend) {
	tick := time.NewTicker(CheckEvery)
	defer tick.Stop()
	for {
		ok := b.ready(be.url.String())
		b.mu.Lock()
		if ok {
			be.misses = 0
		} else {
			be.misses++
		}
		seen := ok || (be.seen && be.misses < FailureThreshold)
		if seen != be.seen || (!be.held && be.ready != seen) {
			be.seen = seen
			if !be.held {
				be.ready = seen
			}
			b.notify()
		}
		b.mu.Unlock()
		select {
		case <-be.quit:
			return
		case <-tick.C:
		}
	}
}

func (b *Balancer) ready(base string) bool {
	resp, err := b.probe.Get(base + "/readyz")
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Remove takes the API at u out of the balancer and stops its checks.
func (b *Balancer) Remove(u string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, be := range b.backends {
		if be.url.String() == u {
			close(be.quit)
			b.backends = append(b.backends[:i], b.backends[i+1:]...)
			b.notify()
			return
		}
	}
}

// Hold keeps the API at u in the rotation whatever its checks say, until
// Release: the time an endpoint that failed its readiness takes to leave
// every node's rules, made as long as the test needs.
func (b *Balancer) Hold(u string) { b.with(u, func(be *backend) { be.held = true }) }

// Release ends Hold: the backend's place follows its checks again.
func (b *Balancer) Release(u string) {
	b.with(u, func(be *backend) {
		be.held = false
		be.ready = be.seen
	})
}

// Mark starts counting the requests sent to the API at u from now on
// (WaitSentSinceMark).
func (b *Balancer) Mark(u string) {
	b.with(u, func(be *backend) { be.mark = be.sent })
}

func (b *Balancer) with(u string, f func(*backend)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	be := b.find(u)
	require.NotNil(b.t, be, "no backend %s", u)
	f(be)
	b.notify()
}

func (b *Balancer) find(u string) *backend {
	for _, be := range b.backends {
		if be.url.String() == u {
			return be
		}
	}
	return nil
}

// WaitRouted waits until the API at u is in the rotation (or out of it).
func (b *Balancer) WaitRouted(u string, routed bool, timeout time.Duration) {
	b.t.Helper()
	b.wait(u, timeout, fmt.Sprintf("routed %t", routed), func(be *backend) bool { return be.ready == routed })
}

// WaitSeen waits until the checks of the API at u say it is ready (or not).
func (b *Balancer) WaitSeen(u string, ready bool, timeout time.Duration) {
	b.t.Helper()
	b.wait(u, timeout, fmt.Sprintf("seen ready %t", ready), func(be *backend) bool { return be.seen == ready })
}

// WaitSentSinceMark waits until n requests have been sent to the API at u
// since Mark.
func (b *Balancer) WaitSentSinceMark(u string, n int, timeout time.Duration) {
	b.t.Helper()
	b.wait(u, timeout, fmt.Sprintf("sent %d requests since the mark", n), func(be *backend) bool { return be.sent-be.mark >= n })
}

// wait waits until done holds for the backend at u, failing the test after
// timeout.
func (b *Balancer) wait(u string, timeout time.Duration, what string, done func(*backend) bool) {
	b.t.Helper()
	deadline := time.After(timeout)
	for {
		b.mu.Lock()
		be, changed := b.find(u), b.changed
		ok := be != nil && done(be)
		b.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			b.t.Fatalf("balancer: %s not %s after %s", u, what, timeout)
		}
	}
}

// Failures are the failed exchanges so far.
func (b *Balancer) Failures() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.failures...)
}
