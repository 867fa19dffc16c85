package api

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// An Idempotency-Key's replay matches its first write when the bodies are
// the same JSON, however written, and only then.
func TestCanonicalBodyTellsBodiesApartByValueOnly(t *testing.T) {
	same := [][2]string{
		{`{"a":1,"b":[true,null]}`, "{ \"b\": [true, null],\n \"a\": 1 }"},
		{`{"n":"x"}`, `{"n":"\u0078"}`},
		{``, ``},
	}
	for _, p := range same {
		require.Equal(t, string(canonicalBody([]byte(p[0]))), string(canonicalBody([]byte(p[1]))), "%s and %s", p[0], p[1])
	}
	differ := [][2]string{
		// Above 2^53 as float64 these two read as one (the bug this guards).
		{`{"roomTypeId":9007199254740993}`, `{"roomTypeId":9007199254740992}`},
		{`{"a":1}`, `{"a":2}`},
		{`{"a":1}`, `{"a":1} {"a":1}`}, // a second value is not one JSON body
		{`{"a":1}`, `{"a":1`},
	}
	for _, p := range differ {
		require.NotEqual(t, string(canonicalBody([]byte(p[0]))), string(canonicalBody([]byte(p[1]))), "%s and %s", p[0], p[1])
	}
}
