// Package auth issues and verifies holdfast's HS256 JWTs (SPEC §2): claims
// `sub` (user id), `role` and a required `exp`. A deployment with an
// identity provider verifies bearer tokens with a Provider instead
// (provider.go), and keeps the Signer for holdfast's own short-lived
// tokens (tickets).
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

// Signer issues tokens with one secret, and verifies them with it and, while
// a rotation lasts, with the secret before it.
type Signer struct {
	secret       []byte
	keys         jwt.Keyfunc // the secret, or it and the previous one
	parser       *jwt.Parser
	ticketParser *jwt.Parser
	now          func() time.Time
	verified     verifiedTokens
}

// Leeway is the clock skew allowed on exp.
const Leeway = 5 * time.Second

// NewSigner returns a Signer for secret.
func NewSigner(secret string) *Signer {
	s := &Signer{secret: []byte(secret), now: time.Now, verified: newVerifiedTokens()}
	s.keys = func(*jwt.Token) (any, error) { return s.secret, nil }
	s.parser = jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(Leeway),
		jwt.WithTimeFunc(func() time.Time { return s.now() }),
	)
	s.ticketParser = jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(Leeway),
		jwt.WithTimeFunc(func() time.Time { return s.now() }),
		jwt.WithAudience(ticketAudience),
	)
	return s
}

// AlsoVerifying makes s accept tokens signed with previous too, the secret
// a rotation replaces (JWT_SECRET_PREVIOUS): tokens issued before the
// rotation stay valid until they expire, while s signs with the new one.
// An empty previous changes nothing. Call it before s is used.
func (s *Signer) AlsoVerifying(previous string) *Signer {
	if previous != "" {
		set := jwt.VerificationKeySet{Keys: []jwt.VerificationKey{s.secret, []byte(previous)}}
		s.keys = func(*jwt.Token) (any, error) { return set, nil }
	}
	return s
}

// Ready reports whether s can verify tokens: a secret is always at hand.
func (s *Signer) Ready() error { return nil }

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
	if p, ok := s.verified.principal(token, s.now()); ok {
		return p, nil
	}
	var c claims
	_, err := s.parser.ParseWithClaims(token, &c, s.keys)
	if err != nil {
		return Principal{}, fmt.Errorf("auth: %w", err)
	}
	if c.Subject == "" {
		return Principal{}, errors.New("auth: token has no subject")
	}
	if len(c.Audience) > 0 { // a ticket or an entry token is no bearer token
		return Principal{}, errors.New("auth: token is meant for another use")
	}
	role, err := domain.ParseRole(c.Role)
	if err != nil {
		return Principal{}, fmt.Errorf("auth: %w", err)
	}
	p := Principal{UserID: c.Subject, Role: role}
	s.verified.remember(token, p, c.ExpiresAt.Time)
	return p, nil
}

// A ticket is a short-lived credential for one GET path, for clients that
// cannot send an Authorization header (a browser's EventSource): the caller
// exchanges its bearer token for one and puts it in the URL. It names its
// path, so it opens nothing else, and its id (jti) lets the API accept it
// only once. Its audience keeps it from ever passing as a bearer token.
type ticketClaims struct {
	Role string `json:"role"`
	Path string `json:"pth"`
	jwt.RegisteredClaims
}

const ticketAudience = "holdfast-ticket"

// Ticket is a verified ticket.
type Ticket struct {
	Principal
	ID      string // jti: accept it once
	Expires time.Time
}

// IssueTicket mints a ticket for p to GET path, valid for ttl from now.
func (s *Signer) IssueTicket(p Principal, path, id string, now time.Time, ttl time.Duration) (string, error) {
	if p.UserID == "" || id == "" {
		return "", errors.New("auth: ticket without subject or id")
	}
	c := ticketClaims{Role: string(p.Role), Path: path, RegisteredClaims: jwt.RegisteredClaims{
		Subject: p.UserID, ID: id, Audience: jwt.ClaimStrings{ticketAudience},
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(s.secret)
}

// VerifyTicket checks a ticket for a GET of path.
func (s *Signer) VerifyTicket(token, path string) (Ticket, error) {
	var c ticketClaims
	_, err := s.ticketParser.ParseWithClaims(token, &c, s.keys)
	if err != nil {
		return Ticket{}, fmt.Errorf("auth: ticket: %w", err)
	}
	if c.Subject == "" || c.ID == "" || c.Path != path {
		return Ticket{}, errors.New("auth: ticket is for another path")
	}
	role, err := domain.ParseRole(c.Role)
	if err != nil {
		return Ticket{}, fmt.Errorf("auth: ticket: %w", err)
	}
	return Ticket{Principal: Principal{UserID: c.Subject, Role: role}, ID: c.ID, Expires: c.ExpiresAt.Time}, nil
}
