package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
)

const (
	testIssuer   = "https://idp.example/realms/holdfast"
	testAudience = "holdfast-api"
)

// idpKey is one of the identity provider's signing keys.
type idpKey struct {
	kid, alg string
	priv     crypto.Signer
}

// Generating RSA keys is slow under -race: each kind is made once.
var (
	rsaKeys = sync.OnceValue(func() [3]*rsa.PrivateKey {
		var ks [3]*rsa.PrivateKey
		for i := range ks {
			ks[i] = must(rsa.GenerateKey(rand.Reader, 2048))
		}
		return ks
	})
	p256Key = sync.OnceValue(func() *ecdsa.PrivateKey { return must(ecdsa.GenerateKey(elliptic.P256(), rand.Reader)) })
	p384Key = sync.OnceValue(func() *ecdsa.PrivateKey { return must(ecdsa.GenerateKey(elliptic.P384(), rand.Reader)) })
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func rsaKey(i int, kid, alg string) idpKey { return idpKey{kid: kid, alg: alg, priv: rsaKeys()[i]} }
func es256Key(kid string) idpKey           { return idpKey{kid: kid, alg: "ES256", priv: p256Key()} }

// sign makes a token with k, naming k's kid and alg in its header.
func (k idpKey) sign(t *testing.T, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.GetSigningMethod(k.alg), c)
	tok.Header["kid"] = k.kid
	s, err := tok.SignedString(k.priv)
	require.NoError(t, err)
	return s
}

// jwk is k's public half as its provider publishes it.
func (k idpKey) jwk(t *testing.T) jwkset.JWKMarshal {
	t.Helper()
	j, err := jwkset.NewJWKFromKey(k.priv.Public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{
		KID: k.kid, ALG: jwkset.ALG(k.alg), USE: jwkset.UseSig}})
	require.NoError(t, err)
	return j.Marshal()
}

// jwksServer is the identity provider's JWKS endpoint: the keys it
// publishes change while a test runs, and it counts every fetch.
type jwksServer struct {
	*httptest.Server
	fetches atomic.Int64

	mu     sync.Mutex
	body   []byte
	status int // when not 200, the answer instead of the key set
}

func newJWKSServer(t *testing.T, keys ...idpKey) *jwksServer {
	s := &jwksServer{status: http.StatusOK}
	s.publish(t, keys...)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		status, body := s.status, s.body
		s.mu.Unlock()
		if status != http.StatusOK {
			http.Error(w, "unavailable", status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

// publish replaces the key set the server answers with.
func (s *jwksServer) publish(t *testing.T, keys ...idpKey) {
	set := jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{}}
	for _, k := range keys {
		set.Keys = append(set.Keys, k.jwk(t))
	}
	body, err := json.Marshal(set)
	require.NoError(t, err)
	s.mu.Lock()
	s.body = body
	s.mu.Unlock()
}

func (s *jwksServer) answer(status int) {
	s.mu.Lock()
	s.status = status
	s.mu.Unlock()
}

// newTestProvider verifies the tokens of srv's keys at a fixed clock, which
// it returns; opts changes the defaults.
func newTestProvider(t *testing.T, srv *jwksServer, opts func(*ProviderOptions)) (*Provider, time.Time) {
	t.Helper()
	o := ProviderOptions{JWKSURL: srv.URL, Issuer: testIssuer, Audience: testAudience, RoleClaim: "role",
		RefreshInterval: time.Hour, MinRefreshInterval: time.Hour}
	if opts != nil {
		opts(&o)
	}
	p, err := NewProvider(t.Context(), o)
	require.NoError(t, err)
	clock := time.Now().Truncate(time.Second)
	p.now = func() time.Time { return clock }
	return p, clock
}

// claimsAt are a valid token's claims at now: for user u, with role.
func claimsAt(now time.Time, u string, role any) jwt.MapClaims {
	return jwt.MapClaims{"iss": testIssuer, "aud": []string{testAudience, "account"}, "sub": u, "role": role,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()}
}

// RS256, PS256, ES256 and ES384 tokens of published keys are accepted; an
// algorithm outside ProviderAlgorithms is refused although the key would
// verify it (control: the same key signing RS256 passes).
func TestProviderAcceptsItsAlgorithms(t *testing.T) {
	keys := []idpKey{rsaKey(0, "rs", "RS256"), rsaKey(1, "ps", "PS256"), es256Key("es"),
		{kid: "es384", alg: "ES384", priv: p384Key()}, rsaKey(2, "rs512", "RS512")}
	srv := newJWKSServer(t, keys...)
	p, now := newTestProvider(t, srv, nil)
	require.NoError(t, p.Ready())

	for i, k := range keys[:4] {
		u := fmt.Sprintf("u%d", i)
		got, err := p.Verify(k.sign(t, claimsAt(now, u, "user")))
		require.NoError(t, err, k.alg)
		require.Equal(t, Principal{UserID: u, Role: domain.RoleUser}, got)
	}
	rs512 := keys[4].sign(t, claimsAt(now, "u", "user"))
	_, err := p.Verify(rs512)
	require.ErrorContains(t, err, "signing method RS512 is invalid")
	_, err = jwt.NewParser(jwt.WithTimeFunc(p.now)).Parse(rs512, func(*jwt.Token) (any, error) { return keys[4].priv.Public(), nil })
	require.NoError(t, err, "control: the published key verifies it")
}

// Each claim check refuses a token that differs from a valid one in that
// claim alone: the valid one passes.
func TestProviderChecksClaims(t *testing.T) {
	k := rsaKey(0, "k1", "RS256")
	p, now := newTestProvider(t, newJWKSServer(t, k), nil)
	over := Leeway + time.Second
	for _, tc := range []struct {
		name   string
		change func(jwt.MapClaims)
		err    string // "" passes
	}{
		{name: "valid", change: func(jwt.MapClaims) {}},
		{name: "expired", change: func(c jwt.MapClaims) { c["exp"] = now.Add(-over).Unix() }, err: "token is expired"},
		{name: "expired within the leeway", change: func(c jwt.MapClaims) { c["exp"] = now.Add(-Leeway + time.Second).Unix() }},
		{name: "no expiry", change: func(c jwt.MapClaims) { delete(c, "exp") }, err: "exp claim is required"},
		{name: "not yet valid", change: func(c jwt.MapClaims) { c["nbf"] = now.Add(over).Unix() }, err: "token is not valid yet"},
		{name: "issued in the future", change: func(c jwt.MapClaims) { c["iat"] = now.Add(over).Unix() }, err: "token used before issued"},
		{name: "wrong issuer", change: func(c jwt.MapClaims) { c["iss"] = "https://idp.example/realms/other" }, err: "token has invalid issuer"},
		{name: "no issuer", change: func(c jwt.MapClaims) { delete(c, "iss") }, err: "iss claim is required"},
		{name: "wrong audience", change: func(c jwt.MapClaims) { c["aud"] = []string{"another-api"} }, err: "token has invalid audience"},
		{name: "audience as one string", change: func(c jwt.MapClaims) { c["aud"] = testAudience }},
		{name: "no audience", change: func(c jwt.MapClaims) { delete(c, "aud") }, err: "aud claim is required"},
		{name: "no subject", change: func(c jwt.MapClaims) { delete(c, "sub") }, err: "token has no subject"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := claimsAt(now, "ann", "user")
			tc.change(c)
			got, err := p.Verify(k.sign(t, c))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, Principal{UserID: "ann", Role: domain.RoleUser}, got)
		})
	}
}

// alg confusion: a token that names HS256 and is signed with the provider's
// public key as the HMAC secret (PEM or DER bytes, as a naive verifier
// would take them) is refused, and so is an unsigned `alg: none` token and
// a token of holdfast's own Signer. The control: a verifier that lets the
// token pick HS256 accepts the forged token, so the refusal is the
// algorithm restriction's doing.
func TestProviderRefusesAlgConfusion(t *testing.T) {
	k := rsaKey(0, "k1", "RS256")
	p, now := newTestProvider(t, newJWKSServer(t, k), nil)
	der, err := x509.MarshalPKIXPublicKey(k.priv.Public())
	require.NoError(t, err)
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})

	for name, secret := range map[string][]byte{"PEM": pemBytes, "DER": der} {
		forged := jwt.NewWithClaims(jwt.SigningMethodHS256, claimsAt(now, "mallory", "admin"))
		forged.Header["kid"] = k.kid
		tok, err := forged.SignedString(secret)
		require.NoError(t, err)
		_, err = p.Verify(tok)
		require.ErrorContains(t, err, "signing method HS256 is invalid", name)

		naive := jwt.NewParser(jwt.WithTimeFunc(p.now))
		_, err = naive.Parse(tok, func(*jwt.Token) (any, error) { return secret, nil })
		require.NoError(t, err, "control: a verifier that lets the token choose HS256 takes the forgery (%s)", name)
	}

	none := jwt.NewWithClaims(jwt.SigningMethodNone, claimsAt(now, "mallory", "admin"))
	none.Header["kid"] = k.kid
	tok, err := none.SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	_, err = p.Verify(tok)
	require.ErrorContains(t, err, "signing method none is invalid")

	es := es256Key(k.kid) // an EC key's token naming the RSA key's kid
	_, err = p.Verify(es.sign(t, claimsAt(now, "mallory", "admin")))
	require.Error(t, err, "a token whose alg does not fit the key its kid names")

	own, err := NewSigner("a-secret-long-enough-for-hs256-0123456789").Issue("ann", domain.RoleUser, now, time.Hour)
	require.NoError(t, err)
	_, err = p.Verify(own)
	require.ErrorContains(t, err, "signing method HS256 is invalid", "holdfast's own HS256 tokens are not bearer tokens here")
}

// The role claim: a string names a role, an array gives its most privileged
// known role, a dotted path reaches into objects, a namespaced name is
// found whole; no known role is refused.
func TestProviderRoleClaim(t *testing.T) {
	k := rsaKey(0, "k1", "RS256")
	srv := newJWKSServer(t, k)
	for _, tc := range []struct {
		name, claim string
		value       any // at the claim's place; nil leaves it out
		want        domain.Role
		err         string
	}{
		{name: "string", claim: "role", value: "staff", want: domain.RoleStaff},
		{name: "array: the most privileged", claim: "role", value: []any{"user", "admin", "staff"}, want: domain.RoleAdmin},
		{name: "array: unknown names ignored", claim: "roles", value: []any{"offline_access", "staff", "uma_authorization"}, want: domain.RoleStaff},
		{name: "dotted path", claim: "realm_access.roles", value: []any{"default-roles-holdfast", "user"}, want: domain.RoleUser},
		{name: "namespaced claim", claim: "https://holdfast.example/role", value: "admin", want: domain.RoleAdmin},
		{name: "missing", claim: "role", err: "token has no role claim"},
		{name: "missing on the path", claim: "realm_access.roles", err: "token has no realm_access.roles claim"},
		{name: "unknown string", claim: "role", value: "superuser", err: "names no holdfast role"},
		{name: "array of unknown names", claim: "roles", value: []any{"offline_access"}, err: "names no holdfast role"},
		{name: "empty array", claim: "roles", value: []any{}, err: "names no holdfast role"},
		{name: "not a string", claim: "role", value: 3, err: "names no holdfast role"},
		{name: "case matters", claim: "role", value: "Admin", err: "names no holdfast role"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, now := newTestProvider(t, srv, func(o *ProviderOptions) { o.RoleClaim = tc.claim })
			c := claimsAt(now, "ann", nil)
			delete(c, "role")
			if tc.value != nil {
				if tc.claim == "realm_access.roles" {
					c["realm_access"] = map[string]any{"roles": tc.value}
				} else {
					c[tc.claim] = tc.value
				}
			}
			got, err := p.Verify(k.sign(t, c))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, Principal{UserID: "ann", Role: tc.want}, got)
		})
	}
}

// Rotation: a key the provider starts to publish is accepted at once (its
// unknown kid triggers a fetch); the old key stays valid while it is
// published, and even after it is removed until the next fetch; after that
// its tokens are refused, but for those verified lately, remembered until
// the cache lets them go.
func TestProviderFollowsKeyRotation(t *testing.T) {
	old, cur := rsaKey(0, "2026-01", "RS256"), es256Key("2026-02")
	srv := newJWKSServer(t, old)
	p, now := newTestProvider(t, srv, func(o *ProviderOptions) { o.MinRefreshInterval = time.Millisecond })
	remembered := old.sign(t, claimsAt(now, "ann", "user"))
	_, err := p.Verify(remembered)
	require.NoError(t, err)
	require.EqualValues(t, 1, srv.fetches.Load())

	_, err = p.Verify(cur.sign(t, claimsAt(now, "bob", "user")))
	require.ErrorContains(t, err, `key not found "2026-02"`, "not published yet")
	srv.publish(t, old, cur)
	_, err = p.Verify(cur.sign(t, claimsAt(now, "bob", "user")))
	require.NoError(t, err, "the new key, at once")
	fetches := srv.fetches.Load()
	_, err = p.Verify(old.sign(t, claimsAt(now, "cy", "user")))
	require.NoError(t, err, "the old key, still published")

	srv.publish(t, cur)
	_, err = p.Verify(old.sign(t, claimsAt(now, "dee", "user")))
	require.NoError(t, err, "the old key, removed but not fetched since")
	require.Equal(t, fetches, srv.fetches.Load())
	_, err = p.Verify(es256Key("forged").sign(t, claimsAt(now, "eve", "user")))
	require.Error(t, err, "an unknown kid: a fetch")
	require.Equal(t, fetches+1, srv.fetches.Load())
	_, err = p.Verify(old.sign(t, claimsAt(now, "fay", "user")))
	require.ErrorContains(t, err, `key not found "2026-01"`, "the old key, once fetched without it")
	_, err = p.Verify(cur.sign(t, claimsAt(now, "gus", "user")))
	require.NoError(t, err)
	_, err = p.Verify(remembered)
	require.NoError(t, err, "a token verified lately, from the cache")
}

// A forged kid, sent again and again, makes the provider fetch the key set
// once per MinRefreshInterval at most. The control: with no minimum, every
// forged kid is a fetch.
func TestProviderBoundsFetchesOnUnknownKids(t *testing.T) {
	k := rsaKey(0, "k1", "RS256")
	forge := func(t *testing.T, p *Provider, now time.Time, n int) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				_, err := p.Verify(es256Key(fmt.Sprintf("forged-%d", i)).sign(t, claimsAt(now, "eve", "admin")))
				require.Error(t, err)
			})
		}
		wg.Wait()
	}

	srv := newJWKSServer(t, k)
	p, now := newTestProvider(t, srv, func(o *ProviderOptions) { o.MinRefreshInterval = time.Hour })
	forge(t, p, now, 200)
	require.EqualValues(t, 2, srv.fetches.Load(), "the first fetch, then one for all forged kids")
	_, err := p.Verify(k.sign(t, claimsAt(now, "ann", "user")))
	require.NoError(t, err, "the published key still verifies")

	ctl := newJWKSServer(t, k)
	p, now = newTestProvider(t, ctl, func(o *ProviderOptions) { o.MinRefreshInterval = time.Nanosecond })
	for range 20 {
		forge(t, p, now, 1)
	}
	require.EqualValues(t, 21, ctl.fetches.Load(), "control: without the bound, a fetch per forged kid")
}

// A provider that cannot be reached when the API starts does not stop it:
// tokens are answered ErrKeysUnavailable (the API's 503) and Ready fails
// until a fetch in the background succeeds; from then on a failing
// provider leaves the keys fetched last in use.
func TestProviderStartsWithoutItsKeys(t *testing.T) {
	k := rsaKey(0, "k1", "RS256")
	srv := newJWKSServer(t, k)
	srv.answer(http.StatusServiceUnavailable)
	p, now := newTestProvider(t, srv, func(o *ProviderOptions) { o.RefreshInterval = 10 * time.Millisecond })
	tok := k.sign(t, claimsAt(now, "ann", "user"))

	require.ErrorIs(t, p.Ready(), ErrKeysUnavailable)
	_, err := p.Verify(tok)
	require.ErrorIs(t, err, ErrKeysUnavailable)

	srv.answer(http.StatusOK)
	require.Eventually(t, func() bool { return p.Ready() == nil }, 10*time.Second, 10*time.Millisecond)
	_, err = p.Verify(tok)
	require.NoError(t, err)

	srv.answer(http.StatusServiceUnavailable)
	seen := srv.fetches.Load()
	require.Eventually(t, func() bool { return srv.fetches.Load() >= seen+2 }, 10*time.Second, 5*time.Millisecond,
		"background refreshes fail")
	require.NoError(t, p.Ready())
	_, err = p.Verify(k.sign(t, claimsAt(now, "bob", "user")))
	require.NoError(t, err, "the keys fetched last stay in use")
	_, err = p.Verify(es256Key("k9").sign(t, claimsAt(now, "eve", "user")))
	require.NotErrorIs(t, err, ErrKeysUnavailable, "a bad token is now told it is bad")
}

// A provider that accepts the connection and never answers holds the start
// up for FetchTimeout, no longer.
func TestProviderFetchIsBounded(t *testing.T) {
	stuck := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stuck:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stuck) })
	p, err := NewProvider(t.Context(), ProviderOptions{JWKSURL: srv.URL, Issuer: testIssuer, Audience: testAudience,
		RoleClaim: "role", RefreshInterval: time.Hour, MinRefreshInterval: time.Hour, FetchTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	require.ErrorContains(t, p.Ready(), "context deadline exceeded")
}
