package api

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPreferredWait(t *testing.T) {
	for prefer, want := range map[string]time.Duration{
		"":                       0,
		"wait=10":                10 * time.Second,
		"Wait = 3":               3 * time.Second,
		`wait="7"`:               7 * time.Second,
		"respond-async, wait=4":  4 * time.Second,
		"wait=4;x=y, return=min": 4 * time.Second,
		"wait=2, wait=9":         2 * time.Second, // the first one counts (RFC 7240 §2)
		"wait=3600":              30 * time.Second,
		"wait=0":                 0,
		"wait=-1":                0,
		"wait=1.5":               0,
		"wait=soon":              0,
		"wait":                   0,
		"respond-async":          0,
		"handling=strict":        0,
		"wait=99999999999999999": 0,
		"waiting=5":              0,
	} {
		require.Equal(t, want, preferredWait([][]byte{[]byte(prefer)}, 30*time.Second), "Prefer: %s", prefer)
	}
	require.Equal(t, 5*time.Second, preferredWait([][]byte{[]byte("respond-async"), []byte("wait=5")}, 30*time.Second), "over two headers")
}

// Whatever a client sends, the wait is whole seconds within the bound.
func FuzzPreferredWait(f *testing.F) {
	for _, s := range []string{"wait=10", `respond-async, wait="3";a=b`, "wait=,", "=;,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, prefer string) {
		d := preferredWait([][]byte{[]byte(prefer)}, 30*time.Second)
		if d < 0 || d > 30*time.Second || d%time.Second != 0 {
			t.Fatalf("Prefer %q: wait %s", prefer, d)
		}
		if d > 0 && !strings.Contains(strings.ToLower(prefer), "wait") {
			t.Fatalf("Prefer %q: wait %s without asking", prefer, d)
		}
	})
}
