// Package auth issues and verifies holdfast's HS256 JWTs (SPEC §2): claims
// `sub` (user id), `role` and a required `exp`.
package auth

import (
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/holdfast/holdfast/domain"
)

// Principal is the authenticated caller.
type Principal struct {
	UserID string
	Role   domain.Role
}

// CanActFor reports whether the caller may act as userID.
func (p Principal) CanActFor(userID string) bool {
	return p.UserID == userID || p.Role.Privileged()
}

type claims struct {
	Role string `json:"role"`
	jwt.RegisteredClaims
}

// Signer issues and verifies tokens with one secret.
type Signer struct {
	secret []byte
	parser *jwt.Parser
}

// NewSigner returns a Signer for secret.
func NewSigner(secret string) *Signer {
	return &Signer{
		secret: []byte(secret),
		parser: jwt.NewParser(
			jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
			jwt.WithExpirationRequired(),
			jwt.WithLeeway(5*time.Second),
		),
	}
}

// Issue mints a token for sub with role, valid for ttl from now.
func (s *Signer) Issue(sub string, role domain.Role, now time.Time, ttl time.Duration) (string, error) {
	if sub == "" {
		return "", errors.New("auth: empty subject")
	}
	c := claims{Role: string(role), RegisteredClaims: jwt.RegisteredClaims{
		Subject:   sub,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(s.secret)
}

// Verify checks a token and returns its principal.
func (s *Signer) Verify(token string) (Principal, error) {
	var c claims
	_, err := s.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return s.secret, nil })
	if err != nil {
		return Principal{}, fmt.Errorf("auth: %w", err)
	}
	if c.Subject == "" {
		return Principal{}, errors.New("auth: token has no subject")
	}
	role, err := domain.ParseRole(c.Role)
	if err != nil {
		return Principal{}, fmt.Errorf("auth: %w", err)
	}
	return Principal{UserID: c.Subject, Role: role}, nil
}
