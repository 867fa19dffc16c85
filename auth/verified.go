package auth

import (
	"strings"
	"time"

	"github.com/holdfast/holdfast/internal/recent"
)

// verifiedTokens remembers the tokens verified lately, until they expire: a
// client sends the same token to submit a write and then to poll for its
// outcome, and verifying it (a signature and two JSON decodes) was a tenth
// of the API's CPU in a rush. Signer and Provider both keep one.
type verifiedTokens struct {
	*recent.Map[string, verifiedToken]
}

type verifiedToken struct {
	p   Principal
	exp time.Time
}

func newVerifiedTokens() verifiedTokens {
	return verifiedTokens{recent.New[string, verifiedToken](time.Minute, 10_000)}
}

// principal returns the principal of token if it was verified lately and
// has not expired since (allowing the Leeway).
func (v verifiedTokens) principal(token string, now time.Time) (Principal, bool) {
	if t, ok := v.Get(token); ok && now.Before(t.exp.Add(Leeway)) {
		return t.p, true
	}
	return Principal{}, false
}

// remember keeps token's principal until exp. The token may share its
// bytes with a buffer its caller reuses (Fiber's header values do): the
// key kept is a copy.
func (v verifiedTokens) remember(token string, p Principal, exp time.Time) {
	v.Put(strings.Clone(token), verifiedToken{p: p, exp: exp})
}
