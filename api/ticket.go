package api

import (
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"github.com/holdfast/holdfast/auth"
	"github.com/holdfast/holdfast/domain"
)

// TicketTTL is how long a ticket may wait before it is used.
const TicketTTL = time.Minute

// TicketParam is the query parameter that carries a ticket.
const TicketParam = "ticket"

// Ticket is the answer to a ticket request.
type Ticket struct {
	Ticket    string    `json:"ticket"`
	ExpiresAt time.Time `json:"expiresAt"`
	URL       string    `json:"url"` // path?ticket=…, ready for an EventSource
}

// IssueTicket mints a ticket that lets the caller GET path once within
// TicketTTL without an Authorization header (auth.Signer.IssueTicket).
func (s *Server) IssueTicket(c *fiber.Ctx, path string) (Ticket, error) {
	now := time.Now()
	tok, err := s.Signer.IssueTicket(Principal(c), path, uuid.NewString(), now, TicketTTL)
	if err != nil {
		return Ticket{}, err
	}
	return Ticket{Ticket: tok, ExpiresAt: now.Add(TicketTTL).UTC().Truncate(time.Second),
		URL: path + "?" + TicketParam + "=" + tok}, nil
}

var errTicket = domain.NewProblem(domain.CodeUnauthenticated,
	"the ticket is invalid, expired, used already or for another path; ask for a new one")

// ticketAuth authenticates a GET by its ?ticket=: valid, for this path, and
// never used before (its id is claimed in Redis until it expires). When the
// request also carried a bearer token (bearer), both must name one user.
func (s *Server) ticketAuth(c *fiber.Ctx, ticket string, bearer *auth.Principal) error {
	if c.Method() != fiber.MethodGet {
		return errTicket
	}
	t, err := s.Signer.VerifyTicket(ticket, c.Path())
	if err != nil {
		return errTicket
	}
	if bearer != nil && bearer.UserID != t.UserID {
		return domain.NewProblem(domain.CodeForbidden, "the ticket belongs to another user")
	}
	// Claimed until the verifier would refuse it anyway: its expiry plus the
	// clock leeway the verifier allows, and never for less than a second.
	keep := max(time.Until(t.Expires)+auth.Leeway+time.Second, time.Second)
	first, err := s.Redis.SetNX(c.UserContext(), "hf:ticket:"+t.ID, 1, keep).Result()
	if err != nil {
		return err
	}
	if !first {
		return errTicket
	}
	c.Locals(localPrincipal, t.Principal)
	return c.Next()
}
