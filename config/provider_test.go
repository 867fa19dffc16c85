package config

import (
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The identity provider is off by default; on, it needs its issuer and
// audience, an https key set URL (http only on a loopback host) and sane
// refresh intervals. Each refused case differs from the accepted one in
// one setting.
func TestIdentityProvider(t *testing.T) {
	c, err := FromMap(map[string]string{"JWT_SECRET": testSecret})
	require.NoError(t, err)
	require.False(t, c.IdentityProvider.Enabled())
	require.Equal(t, IdentityProvider{RoleClaim: "role", RefreshInterval: 15 * time.Minute, MinRefreshInterval: 30 * time.Second},
		c.IdentityProvider)

	on := map[string]string{"JWT_SECRET": testSecret, "JWT_JWKS_URL": "https://sso.example.com/realms/hf/protocol/openid-connect/certs",
		"JWT_ISSUER": "https://sso.example.com/realms/hf", "JWT_AUDIENCE": "holdfast"}
	for _, tc := range []struct {
		name string
		set  map[string]string // over on; "" unsets
		err  string
	}{
		{name: "on"},
		{name: "dotted role claim", set: map[string]string{"JWT_ROLE_CLAIM": "realm_access.roles"}},
		{name: "namespaced role claim", set: map[string]string{"JWT_ROLE_CLAIM": "https://holdfast.example/roles"}},
		{name: "http on loopback", set: map[string]string{"JWT_JWKS_URL": "http://127.0.0.1:8180/certs"}},
		{name: "http on localhost", set: map[string]string{"JWT_JWKS_URL": "http://localhost:8180/certs"}},
		{name: "http on ::1", set: map[string]string{"JWT_JWKS_URL": "http://[::1]:8180/certs"}},
		{name: "no issuer", set: map[string]string{"JWT_ISSUER": ""}, err: "JWT_JWKS_URL needs JWT_ISSUER"},
		{name: "no audience", set: map[string]string{"JWT_AUDIENCE": ""}, err: "JWT_JWKS_URL needs JWT_AUDIENCE"},
		{name: "http over a network", set: map[string]string{"JWT_JWKS_URL": "http://sso.example.com/certs"}, err: "must use https unless its host is loopback"},
		{name: "not a URL", set: map[string]string{"JWT_JWKS_URL": "sso.example.com/certs"}, err: "JWT_JWKS_URL must be an https:// URL"},
		{name: "another scheme", set: map[string]string{"JWT_JWKS_URL": "ftp://sso.example.com/certs"}, err: "JWT_JWKS_URL must be an https:// URL"},
		{name: "leading dot", set: map[string]string{"JWT_ROLE_CLAIM": ".roles"}, err: "JWT_ROLE_CLAIM must be"},
		{name: "empty path step", set: map[string]string{"JWT_ROLE_CLAIM": "realm_access..roles"}, err: "JWT_ROLE_CLAIM must be"},
		{name: "min refresh under 1s", set: map[string]string{"JWT_JWKS_MIN_REFRESH_INTERVAL": "100ms"}, err: "JWT_JWKS_MIN_REFRESH_INTERVAL must be at least 1s"},
		{name: "refresh under min refresh", set: map[string]string{"JWT_JWKS_REFRESH_INTERVAL": "10s"}, err: "JWT_JWKS_REFRESH_INTERVAL must be at least"},
		{name: "issuer without a URL", set: map[string]string{"JWT_JWKS_URL": ""}, err: "set JWT_JWKS_URL too, or unset them"},
		{name: "audience alone", set: map[string]string{"JWT_JWKS_URL": "", "JWT_ISSUER": ""}, err: "set JWT_JWKS_URL too, or unset them"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := maps.Clone(on)
			for k, v := range tc.set {
				if v == "" {
					delete(vars, k)
				} else {
					vars[k] = v
				}
			}
			c, err := FromMap(vars)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.True(t, c.IdentityProvider.Enabled())
			require.Equal(t, vars["JWT_JWKS_URL"], c.IdentityProvider.JWKSURL)
		})
	}
}
