package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/storage"
)

// envelope is the body of every synchronous error (SPEC §2).
type envelope struct {
	Error envelopeError `json:"error"`
}

type envelopeError struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	TraceID string         `json:"traceId"`
	Meta    map[string]any `json:"meta"`
}

// unavailableRetryAfter is the Retry-After, in seconds, of a 503 for a
// dependency that could not serve: long enough for a restarting Postgres or
// a failing-over Redis not to be hammered, short enough to feel live.
const unavailableRetryAfter = 2

// problemFor maps any error to the problem a client sees. Its status is the
// one domain.NewProblem's table gives the code, but for the HTTP layer's own
// refusals, which keep fiber's status; only 5xx are logged as errors (503,
// a store's outage, as a warning).
func problemFor(err error) *domain.Problem {
	if p, ok := domain.AsProblem(err); ok {
		return p
	}
	var fe *fiber.Error
	if errors.As(err, &fe) {
		switch fe.Code {
		case http.StatusNotFound:
			return domain.NewProblem(domain.CodeNotFound, "no such resource").WithStatus(fe.Code)
		case http.StatusMethodNotAllowed:
			return domain.NewProblem(domain.CodeMethodNotAllowed, "method not allowed on this resource").WithStatus(fe.Code)
		case http.StatusRequestEntityTooLarge:
			return domain.NewProblem(domain.CodePayloadTooLarge, "request body is over the size limit").WithStatus(fe.Code)
		case http.StatusUnsupportedMediaType:
			return domain.NewProblem(domain.CodeUnsupportedMedia, "send application/json").WithStatus(fe.Code)
		case http.StatusRequestHeaderFieldsTooLarge, http.StatusRequestURITooLong:
			return domain.NewProblem(domain.CodeInvalidInput, "request headers or URI too large").WithStatus(fe.Code)
		}
		if fe.Code >= 400 && fe.Code < 500 {
			return domain.NewProblem(domain.CodeInvalidInput, "%s", fe.Message).WithStatus(fe.Code)
		}
	}
	if storage.Unavailable(err) {
		return domain.NewProblem(domain.CodeUnavailable,
			"the service cannot reach its database or queue right now; retry shortly").WithMeta("retryAfterSeconds", unavailableRetryAfter)
	}
	if errors.Is(err, domain.ErrNotFound) {
		return domain.NewProblem(domain.CodeNotFound, "no such resource")
	}
	if errors.Is(err, domain.ErrConflict) {
		return domain.NewProblem(domain.CodeConflict, "this conflicts with an existing resource")
	}
	return domain.NewProblem(domain.CodeInternal, "internal error")
}

// errorHandler is Fiber's ErrorHandler: every error leaves as an envelope.
func (s *Server) errorHandler(c *fiber.Ctx, err error) error {
	p := problemFor(err)
	if s.HTTP != nil {
		s.HTTP.ErrorAnswer(p.HTTPStatus, p.Code)
	}
	if traceID(c) == "" { // rejected by the server before any middleware ran (413)
		c.Locals(localTrace, uuid.NewString())
	}
	switch {
	case p.Code == domain.CodeUnavailable && s.draining.Load(): // told to stop: the drain, not an outage
	case p.Code == domain.CodeUnavailable: // an outage, not a defect: a store, or the identity provider's keys
		s.Log.WarnContext(c.UserContext(), "request refused: unavailable", "traceId", traceID(c), "path", c.Path(), "err", err)
	case p.HTTPStatus >= 500:
		s.Log.ErrorContext(c.UserContext(), "request failed", "traceId", traceID(c), "path", c.Path(), "err", err)
	}
	if ra, ok := p.Meta["retryAfterSeconds"]; ok {
		if n, ok := ra.(int); ok {
			c.Set(fiber.HeaderRetryAfter, strconv.Itoa(n))
		}
	}
	meta := p.Meta
	if meta == nil {
		meta = map[string]any{}
	}
	return c.Status(p.HTTPStatus).JSON(envelope{Error: envelopeError{
		Code: p.Code, Message: p.Message, TraceID: traceID(c), Meta: meta,
	}})
}

var (
	errUnauthenticated = domain.NewProblem(domain.CodeUnauthenticated, "missing, invalid or expired bearer token")
	errForbidden       = domain.NewProblem(domain.CodeForbidden, "your role may not do this")
	errNotFound        = domain.NewProblem(domain.CodeNotFound, "no such resource")
)
