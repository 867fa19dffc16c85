package api

import (
	"encoding/base64"
	"errors"
	"slices"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/holdfast/holdfast/auth"
	"github.com/holdfast/holdfast/domain"
)

const localPrincipal = "principal"

// TokenVerifier checks bearer tokens: an auth.Signer (JWT_SECRET, HS256)
// or an auth.Provider (JWT_JWKS_URL, the identity provider's keys). The
// API does not care which.
type TokenVerifier interface {
	Verify(token string) (auth.Principal, error)
	// Ready fails while no token can be checked yet (/readyz answers 503).
	Ready() error
}

var errKeysUnavailable = domain.NewProblem(domain.CodeUnavailable,
	"the identity provider's keys could not be fetched yet; retry shortly").WithMeta("retryAfterSeconds", unavailableRetryAfter)

// refused answers a bearer token the verifier refused: 401, but 503 while
// the identity provider's keys were never fetched, when nothing can be told
// of any token.
func refused(err error) error {
	if errors.Is(err, auth.ErrKeysUnavailable) {
		return errKeysUnavailable
	}
	return errUnauthenticated
}

// authenticate requires a valid bearer JWT, or a ticket for this GET
// (ticket.go), and stores the caller's principal.
func (s *Server) authenticate(c *fiber.Ctx) error {
	h := c.Get(fiber.HeaderAuthorization)
	ticket := c.Query(TicketParam)
	if h == "" && ticket != "" {
		return s.ticketAuth(c, ticket, nil)
	}
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return errUnauthenticated
	}
	p, err := s.Tokens.Verify(strings.TrimSpace(tok))
	if err != nil {
		return refused(err)
	}
	if ticket != "" {
		return s.ticketAuth(c, ticket, &p)
	}
	c.Locals(localPrincipal, p)
	return c.Next()
}

// adminOnly guards /monitoring. Browsers cannot send bearer tokens to a UI,
// so an admin JWT is also accepted as the password of HTTP Basic auth (any
// user name); a 401 asks the browser for it.
func (s *Server) adminOnly(c *fiber.Ctx) error {
	h := c.Get(fiber.HeaderAuthorization)
	tok, bearer := strings.CutPrefix(h, "Bearer ")
	if !bearer {
		if b, ok := strings.CutPrefix(h, "Basic "); ok {
			if raw, err := base64.StdEncoding.DecodeString(b); err == nil {
				_, tok, _ = strings.Cut(string(raw), ":")
			}
		}
	}
	p, err := s.Tokens.Verify(strings.TrimSpace(tok))
	if err != nil {
		c.Set(fiber.HeaderWWWAuthenticate, `Basic realm="holdfast monitoring"`)
		return refused(err)
	}
	if p.Role != domain.RoleAdmin {
		return errForbidden
	}
	return c.Next()
}

// Principal returns the authenticated caller of an /api/v1 route.
func Principal(c *fiber.Ctx) auth.Principal {
	p, _ := c.Locals(localPrincipal).(auth.Principal)
	return p
}

// RequireRole lets only the given roles through.
func RequireRole(roles ...domain.Role) fiber.Handler {
	return func(c *fiber.Ctx) error {
		if !slices.Contains(roles, Principal(c).Role) {
			return errForbidden
		}
		return c.Next()
	}
}
