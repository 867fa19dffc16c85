package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"github.com/holdfast/holdfast/auth"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/requests"
)

// IdempotencyHeader is the header that makes writes safe to retry.
const IdempotencyHeader = "Idempotency-Key"

// accepted is the body of a 202 (SPEC §2).
type accepted struct {
	RequestID string        `json:"requestId"`
	Status    domain.Status `json:"status"`
	StatusURL string        `json:"statusUrl"`
}

// Accept makes sub durable and answers 202 with its status URL. It fills in
// the idempotency key (scoped to the caller and the route pattern), the user
// if unset and the trace id.
func (s *Server) Accept(c *fiber.Ctx, sub requests.Submission) error {
	key := c.Get(IdempotencyHeader)
	if key != "" && !validIdemKey(key) {
		return InvalidField(IdempotencyHeader, "Idempotency-Key must be 1 to 255 printable ASCII characters")
	}
	p := Principal(c)
	if sub.UserID == "" {
		sub.UserID = p.UserID
	}
	sub.IdempotencyKey = key
	sub.Route = c.Method() + " " + c.Route().Path
	if key != "" {
		sub.Fingerprint = fingerprint(c)
	}
	sub.TraceID = traceID(c)
	r, created, err := s.Intake.Accept(c.UserContext(), sub)
	var unsettled *requests.Unsettled
	if errors.As(err, &unsettled) {
		// Postgres did not say whether the write is stored: not "failed",
		// but where to learn its fate (a read settles it).
		c.Set(fiber.HeaderLocation, "/api/v1/requests/"+unsettled.ID.String())
		return domain.NewProblem(domain.CodeUnavailable,
			"the database did not confirm this write in time: it may or may not be stored; its Location tells which").
			WithMeta("requestId", unsettled.ID.String()).WithMeta("retryAfterSeconds", unavailableRetryAfter)
	}
	if err != nil {
		return err
	}
	if created {
		s.Metrics.Accepted.WithLabelValues(sub.Type).Inc()
	} else {
		c.Set("Idempotent-Replayed", "true")
	}
	id := r.ID.String()
	c.Locals(localRequestID, id)
	url := "/api/v1/requests/" + id
	c.Set(fiber.HeaderLocation, url)
	if !created && r.Status.Terminal() { // a replay of a finished write: its outcome, not a 202 to poll
		return c.JSON(r.View())
	}
	// Prefer: wait makes a write one exchange instead of a submit and a
	// poll: in the cart rush (3,000 reserves, 200 clients, A/B pairs, docs/benchmarks.md)
	// 2,791–2,910 → 3,160–3,607 reserves/s, 0.56–0.64 → 0.47–0.54 ms of CPU
	// a reserve. A client that does not send it gets the 202 at once.
	if wait := preferredWait(c.Request().Header.PeekAll("Prefer"), s.cfg.PollMaxWait); wait > 0 {
		c.Set("Preference-Applied", "wait="+strconv.Itoa(int(wait/time.Second)))
		c.Vary("Prefer")
		// The write is durable already: a wait that cannot read its outcome
		// (a store down, say) still answers 202, not an error.
		if view, done, err := s.await(c.UserContext(), c.Context().Done(), p, r.ID, wait); err == nil {
			if view != nil {
				c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
				return c.Send(view)
			}
			if done.Status.Terminal() {
				return c.JSON(done.View())
			}
			r = done
		}
	}
	return c.Status(http.StatusAccepted).JSON(accepted{RequestID: id, Status: r.Status, StatusURL: url})
}

// preferredWait is RFC 7240's "wait" preference among a write's Prefer
// headers ("Prefer: respond-async, wait=10"): whole seconds, at most
// maxWait. The first "wait" counts; an absent or malformed one is 0, as
// RFC 7240 asks a server to ignore a preference it does not understand.
func preferredWait(headers [][]byte, maxWait time.Duration) time.Duration {
	for _, h := range headers {
		for _, pref := range strings.Split(string(h), ",") {
			pref, _, _ = strings.Cut(pref, ";") // parameters: none defined for wait
			name, value, _ := strings.Cut(pref, "=")
			if !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			value = strings.Trim(strings.TrimSpace(value), `"`)
			n, err := strconv.ParseUint(value, 10, 32)
			if err != nil {
				return 0
			}
			return min(time.Duration(n)*time.Second, maxWait.Truncate(time.Second))
		}
	}
	return 0
}

func validIdemKey(k string) bool {
	if len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// getRequest answers GET /api/v1/requests/{id}[?wait=10s]: the owner or
// staff see the request; anyone else gets 404, as for an unknown id.
func (s *Server) getRequest(c *fiber.Ctx) error {
	id, err := uuid.Parse(c.Params("id"))
	if err != nil {
		return errNotFound
	}
	wait, err := parseWait(c.Query("wait"), s.cfg.PollMaxWait)
	if err != nil {
		return err
	}
	view, r, err := s.await(c.UserContext(), c.Context().Done(), Principal(c), id, wait)
	if err != nil {
		return err
	}
	if view != nil {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Send(view)
	}
	return c.JSON(r.View())
}

// await reads request id for p, waiting up to wait for it to be terminal.
// It returns the view the worker announced (JSON) when that is what ended
// the wait, else the request as read: terminal, or still open when the
// wait ran out or stop closed (the server shutting down). Someone else's
// request is errNotFound. With ANNOUNCED_VIEWS=false the request is read
// from Postgres at the start and once woken, and the view is never used.
//
// A long poll listens before it looks, so an announcement made between the
// look and the wait is not missed, and the look need not be repeated once
// the wait begins. A request this process accepted and that is not
// announced yet is still open: it waits without a read; one announced
// already is answered with the view it was announced with.
func (s *Server) await(ctx context.Context, stop <-chan struct{}, p auth.Principal, id uuid.UUID, wait time.Duration) ([]byte, *requests.Request, error) {
	var done <-chan []byte
	var r *requests.Request // nil while not read
	open := false
	if wait > 0 {
		var cancel func()
		done, cancel = s.Notifier.Wait(id)
		defer cancel()
		if s.cfg.AnnouncedViews {
			view, tracked, err := s.announced(p, id, done)
			if view != nil || err != nil {
				return view, nil, err
			}
			open = tracked
		}
	}
	if !open {
		var err error
		if r, err = s.settledGet(ctx, p, id); err != nil {
			return nil, nil, err
		}
		if !p.CanActFor(r.UserID) {
			return nil, nil, errNotFound
		}
		open = !r.Status.Terminal()
	}
	if wait > 0 && open {
		return s.waitTerminal(ctx, stop, id, r, done, wait)
	}
	return nil, r, nil
}

// settleWithin is how old an id may be for a read to settle it: a write
// answered Unsettled is read within minutes, after an outage within hours.
// An unknown id older than this, or than half of REQUEST_RETENTION (it may
// be a request retention deleted, which must not read as not stored), is
// answered not found, as before, and leaves no tombstone.
const settleWithin = 24 * time.Hour

// settledGet reads request id. An id that is not stored and that this
// service may have minted lately (UUIDv7, within settleWithin) may be a
// write whose client was told its storing was in doubt: the read settles
// it (a tombstone for p, unless the write is stored by now) and reads
// again, so it finds the request or that it was not stored, for good.
func (s *Server) settledGet(ctx context.Context, p auth.Principal, id uuid.UUID) (*requests.Request, error) {
	r, err := s.Store.Get(ctx, id)
	if !errors.Is(err, domain.ErrNotFound) || id.Version() != 7 {
		return r, err
	}
	within := settleWithin
	if keep := s.cfg.RequestRetention / 2; keep > 0 && keep < within {
		within = keep
	}
	if minted := time.Unix(id.Time().UnixTime()); time.Since(minted) > within || time.Until(minted) > time.Minute {
		return r, err
	}
	if err := s.Store.Settle(ctx, []uuid.UUID{id}, []string{p.UserID}); err != nil {
		return nil, err
	}
	return s.Store.Get(ctx, id)
}

// announced answers from what this process knows of request id: its
// announced view, or open when it accepted the request and no worker has
// announced it yet. done is the poll's wait, listening already.
func (s *Server) announced(p auth.Principal, id uuid.UUID, done <-chan []byte) (view []byte, open bool, err error) {
	t, tracked := s.Notifier.Local(id, p.CanActFor)
	if !tracked {
		return nil, false, nil
	}
	if !p.CanActFor(t.Owner) {
		return nil, false, errNotFound
	}
	if t.View == nil && t.Announced {
		select { // announced to this poll's own wait, just now
		case t.View = <-done:
		default:
		}
	}
	return t.View, !t.Announced, nil
}

// waitTerminal long-polls request id, whose state r was read after done
// began listening (nil if it was not read: the request was accepted here and
// not yet announced). It wakes on the worker's announcement, which carries
// the terminal view (returned as view), and also reads Postgres every
// second, so a lost announcement costs at most 1 s. The wait outlasts the
// request's DEPENDENCY_TIMEOUT; each read is bounded by it instead. A server
// shutting down (stop) ends it at once: a held write answers 202 rather than
// have its connection cut, which a client without an Idempotency-Key could
// only retry as a new write.
func (s *Server) waitTerminal(ctx context.Context, stop <-chan struct{}, id uuid.UUID, r *requests.Request, done <-chan []byte, wait time.Duration) ([]byte, *requests.Request, error) {
	ctx = context.WithoutCancel(ctx)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case view := <-done:
			if s.cfg.AnnouncedViews {
				return view, nil, nil
			}
			return s.current(ctx, id, nil)
		case <-tick.C:
		case <-deadline.C:
			return s.current(ctx, id, r)
		case <-stop: // shutting down: answer now, within SHUTDOWN_TIMEOUT
			return s.current(ctx, id, r)
		}
		next, err := s.read(ctx, id)
		if err != nil || next.Status.Terminal() {
			return nil, next, err
		}
		r = next
	}
}

// current is r, or request id as read now if r is nil.
func (s *Server) current(ctx context.Context, id uuid.UUID, r *requests.Request) ([]byte, *requests.Request, error) {
	if r != nil {
		return nil, r, nil
	}
	r, err := s.read(ctx, id)
	return nil, r, err
}

// read reads request id within DEPENDENCY_TIMEOUT.
func (s *Server) read(ctx context.Context, id uuid.UUID) (*requests.Request, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DependencyTimeout)
	defer cancel()
	return s.Store.Get(ctx, id)
}

// parseWait reads ?wait= as a Go duration ("10s", "1500ms") or whole seconds.
func parseWait(v string, maxWait time.Duration) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.Atoi(strings.TrimSpace(v))
		if nerr != nil {
			return 0, InvalidField("wait", "wait must be a duration such as 10s (at most %s)", maxWait)
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 || d > maxWait {
		return 0, InvalidField("wait", "wait must be between 0s and %s", maxWait)
	}
	return d, nil
}

// fingerprint is what the client sent: method, path and the body in a
// canonical form (canonicalBody).
func fingerprint(c *fiber.Ctx) []byte {
	return append([]byte(c.Method()+" "+c.Path()+"\n"), canonicalBody(c.Body())...)
}

// canonicalBody is a JSON body decoded and re-encoded, so that key order
// and spacing do not matter, its numbers keeping their digits
// (json.Number: as float64, two integers above 2^53 that differ would read
// as one). A body that is not one JSON value stays as it is.
func canonicalBody(body []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil || dec.Decode(new(any)) != io.EOF {
		return body
	}
	canon, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return canon
}
