package systest

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type connRequests struct{}

// dropSecond is a backend that answers 200, but closes a connection
// without an answer on its second request (not /readyz): the way a
// server that shut down under a kept-alive connection looks to a client.
func dropSecond(t *testing.T) *httptest.Server {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n := r.Context().Value(connRequests{}).(*atomic.Int32).Add(1)
		if r.URL.Path != "/readyz" && n == 2 {
			conn, _, err := w.(http.Hijacker).Hijack()
			require.NoError(t, err)
			_ = conn.Close()
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, connRequests{}, new(atomic.Int32))
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// The balancer reports every failed exchange with a backend, including one
// the transport hid from the client by sending a request again on a new
// connection, and a backend that is gone.
func TestBalancerRecordsFailedExchanges(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		method string
		status int // what the client sees of the second request
		want   string
	}{
		// Go's transport sends a GET again, unseen, when a kept-alive
		// connection fails under it.
		{"GET", http.StatusOK, "sent again on a new connection"},
		{"POST", http.StatusBadGateway, "EOF"},
	} {
		t.Run(tc.method, func(t *testing.T) {
			t.Parallel()
			backend := dropSecond(t)
			b := NewBalancer(t)
			b.Add(backend.URL)
			b.WaitRouted(backend.URL, true, 10*time.Second)
			client := &http.Client{Timeout: 10 * time.Second}
			send := func() int {
				var body io.Reader
				if tc.method == "POST" {
					body = strings.NewReader("body")
				}
				req, err := http.NewRequest(tc.method, b.URL+"/x", body)
				require.NoError(t, err)
				resp, err := client.Do(req)
				require.NoError(t, err, "the client's own connection to the balancer holds")
				_ = resp.Body.Close()
				return resp.StatusCode
			}
			require.Equal(t, http.StatusOK, send())
			require.Empty(t, b.Failures())
			require.Equal(t, tc.status, send())
			failures := b.Failures()
			require.Len(t, failures, 1)
			require.Contains(t, failures[0], tc.want)
		})
	}
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		backend := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		b := NewBalancer(t)
		b.Add(backend.URL)
		b.WaitRouted(backend.URL, true, 10*time.Second)
		b.Hold(backend.URL) // in the rotation still, as an endpoint not yet removed
		backend.Close()
		resp, err := http.Get(b.URL + "/x")
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusBadGateway, resp.StatusCode)
		failures := b.Failures()
		require.Len(t, failures, 1)
		require.Contains(t, failures[0], "connection refused")
	})
}
