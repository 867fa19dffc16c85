package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/cmd/wiring"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/probe"
)

// idp is an identity provider: one RSA signing key, published at a JWKS
// URL that can be made to fail.
type idp struct {
	*httptest.Server
	key     *rsa.PrivateKey
	failing atomic.Bool
}

const (
	idpIssuer   = "https://sso.example/realms/holdfast"
	idpAudience = "holdfast"
)

func newIDP(t *testing.T) *idp {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	jwk, err := jwkset.NewJWKFromKey(key.Public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{
		KID: "k1", ALG: jwkset.AlgRS256, USE: jwkset.UseSig}})
	require.NoError(t, err)
	set, err := json.Marshal(jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{jwk.Marshal()}})
	require.NoError(t, err)
	p := &idp{key: key}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.failing.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		_, _ = w.Write(set)
	}))
	t.Cleanup(p.Close)
	return p
}

// overrides configure a holdfast to take p's tokens, the role in Keycloak's
// realm_access.roles.
func (p *idp) overrides() []string {
	return []string{"JWT_JWKS_URL", p.URL, "JWT_ISSUER", idpIssuer, "JWT_AUDIENCE", idpAudience, "JWT_ROLE_CLAIM", "realm_access.roles"}
}

// token is a token p signs for sub, its roles as the provider lists them.
func (p *idp) token(t *testing.T, sub string, roles ...string) string {
	now := time.Now()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{
		"iss": idpIssuer, "aud": []string{idpAudience, "account"}, "sub": sub, "realm_access": map[string]any{"roles": roles},
		"iat": now.Unix(), "exp": now.Add(10 * time.Minute).Unix()})
	tok.Header["kid"] = "k1"
	s, err := tok.SignedString(p.key)
	require.NoError(t, err)
	return s
}

// With JWT_JWKS_URL set, the identity provider's tokens authenticate end to
// end: a write is accepted for the token's subject and read back by it
// alone. holdfast's own HS256 tokens, which a system without the setting
// takes (TestAuthentication), are refused, and so is an HS256 token
// signed with the provider's public key.
func TestIdentityProviderTokens(t *testing.T) {
	t.Parallel()
	p := newIDP(t)
	s := systest.Start(t, systest.Options{Workers: 1, Overrides: p.overrides()})

	ann := s.Client("ann", domain.RoleUser)
	ann.Token = p.token(t, "f3c1-ann", "offline_access", "user")
	id := ann.Probe(probe.Payload{Keys: []string{"idp-a"}})
	require.Equal(t, domain.StatusSucceeded, ann.Wait(id, 30*time.Second).Status)
	var owner string
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT user_id FROM requests WHERE id = $1`, id).Scan(&owner))
	require.Equal(t, "f3c1-ann", owner, "the token's sub is the caller")

	bob := s.Client("bob", domain.RoleUser)
	bob.Token = p.token(t, "9d0e-bob", "user")
	require.Equal(t, http.StatusNotFound, bob.Do("GET", "/api/v1/requests/"+id, nil).Status, "another user's request")
	staff := s.Client("st", domain.RoleStaff)
	staff.Token = p.token(t, "77aa-st", "user", "staff")
	require.Equal(t, http.StatusOK, staff.Do("GET", "/api/v1/requests/"+id, nil).Status, "staff, the most privileged of its roles")

	der, err := x509.MarshalPKIXPublicKey(p.key.Public())
	require.NoError(t, err)
	forged := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": idpIssuer, "aud": idpAudience, "sub": "f3c1-ann",
		"realm_access": map[string]any{"roles": []string{"admin"}}, "exp": time.Now().Add(time.Hour).Unix()})
	forged.Header["kid"] = "k1"
	forgedTok, err := forged.SignedString(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	require.NoError(t, err)
	for name, tok := range map[string]string{
		"holdfast's own HS256 token":                s.Token("f3c1-ann", domain.RoleUser),
		"HS256 signed with the provider's key":      forgedTok,
		"the provider's token without a known role": p.token(t, "f3c1-ann", "offline_access"),
	} {
		c := s.Client("ann", domain.RoleUser)
		c.Token = tok
		r := c.Do("GET", "/api/v1/requests/"+id, nil)
		require.Equal(t, http.StatusUnauthorized, r.Status, name)
		require.Equal(t, domain.CodeUnauthenticated, r.ErrorCode(t), name)
	}
}

// An API whose identity provider cannot be reached when it starts starts
// anyway, unready: /readyz and every bearer token are answered 503 with
// Retry-After (never 401, never a hang) until the keys are fetched; then
// the provider's tokens are accepted.
func TestAPIWaitsForTheProvidersKeys(t *testing.T) {
	t.Parallel()
	p := newIDP(t)
	p.failing.Store(true)
	s := systest.Start(t, systest.Options{NoAPI: true, Overrides: p.overrides()})
	url := testenv.Serve(t, func(ctx context.Context, ln net.Listener) error {
		return (&wiring.API{Config: s.Cfg, Log: s.Log, Listener: ln}).Run(ctx)
	})
	c := s.Client("ann", domain.RoleUser).At(url)
	c.Token = p.token(t, "f3c1-ann", "user")

	for _, r := range []systest.Response{c.Do("GET", "/readyz", nil), c.Do("GET", "/api/v1/requests/00000000-0000-0000-0000-000000000000", nil)} {
		require.Equal(t, http.StatusServiceUnavailable, r.Status, "body: %s", r.Body)
		require.Equal(t, domain.CodeUnavailable, r.ErrorCode(t))
		require.Equal(t, "2", r.Header.Get("Retry-After"))
	}

	p.failing.Store(false)
	require.Eventually(t, func() bool { return c.Do("GET", "/readyz", nil).Status == http.StatusOK }, 20*time.Second, 50*time.Millisecond)
	r := c.Do("GET", "/api/v1/requests/00000000-0000-0000-0000-000000000000", nil)
	require.Equal(t, http.StatusNotFound, r.Status, "authenticated: body: %s", r.Body)
}
