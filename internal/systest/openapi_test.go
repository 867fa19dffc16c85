package systest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// recordingTB records Errorf calls instead of failing the test.
type recordingTB struct {
	testing.TB
	errors []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// TestCheckedTransportFailsTheTestOnAMismatch is the control case of the
// suite-wide response validation: an answer that breaks the document fails
// the test (here, a recorded Errorf), one that keeps it does not, and the
// body still reaches the caller whole.
func TestCheckedTransportFailsTheTestOnAMismatch(t *testing.T) {
	answer := `{"status":"ok","version":"(devel)","revision":""}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}))
	defer srv.Close()
	rec := &recordingTB{TB: t}
	hc := (&System{}).HTTPClient(rec)

	get := func() string {
		resp, err := hc.Get(srv.URL + "/healthz")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	require.Equal(t, answer, get())
	require.Empty(t, rec.errors)

	answer = `{"status":"degraded","version":"(devel)","revision":""}`
	require.Equal(t, answer, get())
	require.Len(t, rec.errors, 1)
	require.Contains(t, rec.errors[0], "/status")
}
