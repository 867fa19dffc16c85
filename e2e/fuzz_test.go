package e2e

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
)

// FuzzWriteOverHTTP sends arbitrary bodies and headers to a real API: the
// answer is a 202 or a 4xx error envelope, never a 5xx.
func FuzzWriteOverHTTP(f *testing.F) {
	f.Add([]byte(`{"keys":["a"]}`), "application/json", "k1")
	f.Add([]byte(`{"keys":["a"],"limit":"x"}`), "application/json", "")
	f.Add([]byte(`{"keys":["a"]`), "application/json; charset=utf-8", "k2")
	f.Add([]byte("\x00\x01"), "application/octet-stream", "\x7f")
	f.Add([]byte(`{"keys":["a"]}`), "", "key with spaces")
	f.Add([]byte(`{"keys":["a"],"limit":9223372036854775808}`), "application/json", "")
	s := systest.Start(f, systest.Options{})
	c := s.Client("fuzzer", domain.RoleUser) // made outside: f's helpers may not run in the target
	f.Fuzz(func(t *testing.T, body []byte, contentType, idemKey string) {
		headers := []string{"Content-Type", contentType}
		if idemKey != "" {
			headers = append(headers, "Idempotency-Key", idemKey)
		}
		r, err := c.WithT(t).TryDo("POST", "/api/v1/probe", body, headers...)
		if err != nil {
			t.Skip("net/http refuses to send this input:", err) // e.g. control bytes in a header
		}
		require.Less(t, r.Status, 500, "body: %s", r.Body)
		if r.Status != http.StatusAccepted {
			require.GreaterOrEqual(t, r.Status, 400)
			r.ErrorCode(t)
		}
	})
}
