package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// IdentityProvider makes the API verify bearer tokens signed by the
// organisation's identity provider (Keycloak, Auth0, Cognito, Entra ID)
// with the keys it publishes at JWKSURL, instead of holdfast's own HS256
// tokens: with JWKSURL set, an HS256 bearer token is refused, while
// JWT_SECRET goes on signing holdfast's own short-lived tokens (tickets,
// waiting-room entry tokens). Empty JWKSURL: off.
type IdentityProvider struct {
	JWKSURL  string `env:"JWT_JWKS_URL"`
	Issuer   string `env:"JWT_ISSUER"`   // the `iss` every token must carry
	Audience string `env:"JWT_AUDIENCE"` // a value every token's `aud` must contain
	// RoleClaim names the claim that carries the caller's role: a name,
	// or a dotted path into nested objects (realm_access.roles).
	RoleClaim string `env:"JWT_ROLE_CLAIM" envDefault:"role"`
	// RefreshInterval is how often the key set is fetched again in the
	// background (new keys, removed ones).
	RefreshInterval time.Duration `env:"JWT_JWKS_REFRESH_INTERVAL" envDefault:"15m"`
	// MinRefreshInterval is the least time between two fetches that
	// tokens naming an unknown key id (`kid`) trigger.
	MinRefreshInterval time.Duration `env:"JWT_JWKS_MIN_REFRESH_INTERVAL" envDefault:"30s"`
}

// Enabled reports whether bearer tokens come from the identity provider.
func (p IdentityProvider) Enabled() bool { return p.JWKSURL != "" }

// Validate refuses an identity provider that is half configured: a
// deployment that forgot the issuer or the audience would accept tokens the
// provider signed for other applications.
func (p IdentityProvider) Validate() error {
	if !p.Enabled() {
		if p.Issuer != "" || p.Audience != "" {
			return fmt.Errorf("config: JWT_ISSUER and JWT_AUDIENCE apply to an identity provider's tokens: set JWT_JWKS_URL too, or unset them")
		}
		return nil
	}
	if err := validJWKSURL(p.JWKSURL); err != nil {
		return err
	}
	switch {
	case p.Issuer == "":
		return fmt.Errorf("config: JWT_JWKS_URL needs JWT_ISSUER, the issuer (iss) of the provider's tokens, like https://sso.example.com/realms/holdfast")
	case p.Audience == "":
		return fmt.Errorf("config: JWT_JWKS_URL needs JWT_AUDIENCE, the audience (aud) the provider puts in tokens meant for holdfast")
	case p.RoleClaim == "" || strings.HasPrefix(p.RoleClaim, ".") || strings.HasSuffix(p.RoleClaim, ".") || strings.Contains(p.RoleClaim, ".."):
		return fmt.Errorf("config: JWT_ROLE_CLAIM must be a claim name or a dotted path like realm_access.roles, got %q", p.RoleClaim)
	case p.MinRefreshInterval < time.Second:
		return fmt.Errorf("config: JWT_JWKS_MIN_REFRESH_INTERVAL must be at least 1s")
	case p.RefreshInterval < p.MinRefreshInterval:
		return fmt.Errorf("config: JWT_JWKS_REFRESH_INTERVAL must be at least JWT_JWKS_MIN_REFRESH_INTERVAL")
	}
	return nil
}

// validJWKSURL accepts an https URL, or an http one on a loopback host (a
// provider or a proxy on the same machine): keys fetched in clear over a
// network could be replaced on the way.
func validJWKSURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.Fragment != "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("config: JWT_JWKS_URL must be an https:// URL of the provider's key set, got %q", s)
	}
	if u.Scheme == "http" && !loopback(u.Hostname()) {
		return fmt.Errorf("config: JWT_JWKS_URL must use https unless its host is loopback (localhost, 127.0.0.1, ::1), got %q", s)
	}
	return nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
