package probe

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/api"
	"github.com/holdfast/holdfast/domain"
)

// FuzzDecode covers the request decoding path: whatever the body, decoding
// and validation either accept a payload that satisfies every rule or return
// a 400 problem; nothing panics.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"keys":["a"]}`, `{"keys":["a","b"],"limit":3,"sleepMs":5}`, `{"keys":[]}`, `{"keys":"a"}`,
		`{"keys":["a"],"limit":-1}`, `{"keys":["a"],"limit":1e99}`, `{"keys":["a"]}{}`, `[`, ``, `null`,
		`{"keys":["a"],"extra":1}`, "{\"keys\":[\"\xff\"]}", `{"keys":[null]}`, `{"sleepMs":1001,"keys":["a"]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var p Payload
		err := api.DecodeJSON(body, &p)
		if err == nil {
			err = p.Validate()
		}
		if err != nil {
			prob, ok := domain.AsProblem(err)
			require.True(t, ok, "not a problem: %v", err)
			require.Equal(t, http.StatusBadRequest, prob.HTTPStatus)
			require.Equal(t, domain.CodeInvalidInput, prob.Code)
			require.NotEmpty(t, prob.Message)
			return
		}
		require.NotEmpty(t, p.Keys)
		require.LessOrEqual(t, len(p.Keys), 4)
		for _, k := range p.Keys {
			require.Regexp(t, `^[a-z0-9_-]{1,64}$`, k)
		}
		require.GreaterOrEqual(t, p.Limit, int64(0))
		require.True(t, p.SleepMs >= 0 && p.SleepMs <= 1000)
	})
}
