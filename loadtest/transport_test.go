package loadtest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/client"
)

// The load tool's transport carries what package client sends and reads
// back what it needs: method, path, query, headers and body out; status,
// headers and body in; and it gives up at the request's deadline.
func TestFastTransportCarriesWhatTheClientSendsAndReads(t *testing.T) {
	t.Parallel()
	slow := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/things/{id}", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.PathValue("id") != "7" || r.Header.Get("Authorization") != "Bearer tok" ||
			r.Header.Get("Idempotency-Key") != "k-1" || r.Header.Get("Content-Type") != "application/json" ||
			string(body) != `{"phone":"+821012345678"}` {
			w.WriteHeader(http.StatusTeapot)
			_, _ = w.Write([]byte(r.Header.Get("Authorization") + " " + r.Header.Get("Idempotency-Key") + " " + string(body)))
			return
		}
		w.Header().Set("Location", "/api/v1/requests/r-1")
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(map[string]string{"requestId": "r-1", "status": "queued", "statusUrl": "/api/v1/requests/r-1"})
	})
	mux.HandleFunc("GET /api/v1/requests/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("wait") != "10s" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"requestId": r.PathValue("id"), "status": "rejected",
			"error": map[string]any{"code": "SOLD_OUT", "message": "no seat is left", "httpStatus": 409}})
	})
	mux.HandleFunc("POST /api/v1/busy", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":{"code":"RATE_LIMITED","message":"slow down","traceId":"t"}}`))
	})
	mux.HandleFunc("GET /api/v1/slow", func(http.ResponseWriter, *http.Request) { <-slow })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(slow) }) // before Close, which waits for the handlers

	c := client.NewWithHTTP(srv.URL, "tok", &http.Client{Transport: newFastTransport()})
	ctx := context.Background()

	acc, err := c.Submit(ctx, http.MethodPost, "/api/v1/things/7", map[string]string{"phone": "+821012345678"}, client.IdempotencyKey("k-1"))
	require.NoError(t, err)
	require.Equal(t, client.Accepted{RequestID: "r-1", Status: "queued", StatusURL: "/api/v1/requests/r-1", Replayed: true}, acc)

	out, err := c.Wait(ctx, "r-1")
	require.NoError(t, err)
	require.Equal(t, client.StatusRejected, out.Status)
	require.True(t, client.IsCode(out.Err(), "SOLD_OUT"))

	_, err = c.Submit(ctx, http.MethodPost, "/api/v1/busy", nil)
	var apiErr *client.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusTooManyRequests, apiErr.HTTPStatus)
	require.Equal(t, "RATE_LIMITED", apiErr.Code)
	require.Equal(t, 3*time.Second, apiErr.RetryAfter)

	// An exchange ends at its deadline, or when its context is cancelled,
	// with the context's error, as net/http's do.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	require.ErrorIs(t, c.Do(short, http.MethodGet, "/api/v1/slow", nil, nil), context.DeadlineExceeded)
	// Not long before it: fasthttp's own timer, set from the deadline, may
	// fire a little early (198.9 ms was seen).
	require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
	require.Less(t, time.Since(start), 5*time.Second, "an exchange outlived its deadline")

	long, cancelLong := context.WithTimeout(ctx, time.Hour)
	time.AfterFunc(200*time.Millisecond, cancelLong)
	start = time.Now()
	require.ErrorIs(t, c.Do(long, http.MethodGet, "/api/v1/slow", nil, nil), context.Canceled)
	require.Less(t, time.Since(start), 5*time.Second, "a cancelled exchange went on")

	done, cancelDone := context.WithCancel(ctx)
	cancelDone()
	require.ErrorIs(t, c.Do(done, http.MethodGet, "/api/v1/slow", nil, nil), context.Canceled)
}

// A write is sent once: when the connection breaks after the request went
// out, the error is the caller's, not a second delivery to the server.
func TestFastTransportNeverSendsAWriteTwice(t *testing.T) {
	t.Parallel()
	var got atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close() // the request arrived; the answer never comes
		}
	}))
	t.Cleanup(srv.Close)
	c := client.NewWithHTTP(srv.URL, "tok", &http.Client{Transport: newFastTransport()})
	_, err := c.Submit(context.Background(), http.MethodPost, "/api/v1/things", map[string]int{"n": 1})
	require.Error(t, err)
	require.Equal(t, int32(1), got.Load(), "the write reached the server more than once")
}
