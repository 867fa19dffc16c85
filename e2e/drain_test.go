package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/systest"
)

// An API told to stop (SIGTERM; here its context, which the signal ends
// in cmd/api) first drains: /readyz answers 503 while it goes on serving
// new connections, each answer closing its connection, for
// SHUTDOWN_DRAIN_DELAY; then it stops. Control: with no delay, the
// listener is closed as soon as the API is told to stop, and new
// connections are refused (an operator saw 5 of 5 refused within a second
// of a rollout's SIGTERM, before the load balancer had taken the pod out).
func TestAnAPIToldToStopDrainsFirst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		delay string
	}{{"drain", "10s"}, {"control without a delay", "0s"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := systest.Start(t, systest.Options{NoAPI: true, Overrides: []string{"SHUTDOWN_DRAIN_DELAY", tc.delay}})
			url, stop := s.StartStoppableAPI()
			type answer struct {
				status     int
				close      bool // the API asked to close the connection
				retryAfter string
			}
			fresh := func(path string) (answer, error) {
				// A new connection each time, as a client the load balancer
				// sends to this API after the signal; one that would keep
				// it open, so that Close is the API's word.
				tr := &http.Transport{}
				defer tr.CloseIdleConnections()
				r, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url + path)
				if err != nil {
					return answer{}, err
				}
				_ = r.Body.Close()
				return answer{r.StatusCode, r.Close, r.Header.Get("Retry-After")}, nil
			}
			a, err := fresh("/readyz")
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, a.status)
			require.False(t, a.close, "before the signal a connection stays open")

			stopped := make(chan struct{})
			go func() { stop(); close(stopped) }()
			if tc.delay == "0s" {
				<-stopped
				_, err := fresh("/healthz")
				require.Error(t, err, "the control: a new connection right after the signal is refused")
				return
			}
			// The readiness flips at once: the first answer that is not 200
			// is a 503 from a listening API, not a refused connection.
			for {
				a, err := fresh("/readyz")
				require.NoError(t, err, "a connection refused before the drain ended")
				if a.status != http.StatusOK {
					require.Equal(t, http.StatusServiceUnavailable, a.status)
					require.NotEmpty(t, a.retryAfter)
					break
				}
			}
			for range 5 {
				a, err := fresh("/healthz")
				require.NoError(t, err, "a new connection during the drain is served")
				require.Equal(t, http.StatusOK, a.status)
				require.True(t, a.close, "each answer during the drain closes its connection")
			}
			<-stopped
			_, err = fresh("/healthz")
			require.Error(t, err, "after the drain the API stops")
		})
	}
}
