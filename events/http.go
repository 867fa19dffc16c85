package events

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast/holdfast/api"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/storage"
	"github.com/holdfast/holdfast/worker"
)

// MaxSeats bounds the seats of one event.
const MaxSeats = 100_000

var e164 = regexp.MustCompile(`^\+[1-9][0-9]{1,14}$`)

// API returns the events routes as an api.Mount.
func API(duplicateWindow time.Duration) api.Mount {
	return func(v1 fiber.Router, s *api.Server) {
		cfg := s.Config()
		h := &handlers{catalog: NewCatalog(s.Pool), s: s, room: NewRoom(s.Redis, cfg.JWTSecret),
			counts: NewCounts(s.Pool, s.Redis)}
		writes := api.RateLimit(s.Redis, s.Log, api.PerIP(s), api.PerUser(s))
		// Seed 004 §9's dup:req: one FCFS request per user and event per
		// window, claimed in the same round trip as the rate limits. A
		// repeat that is itself invalid gets its own 4xx, not the 429.
		window := api.Window{Duration: duplicateWindow, Key: fcfsClaim,
			Valid: func(c *fiber.Ctx) error { _, err := h.fcfsPayload(c); return err }}
		grabs := api.Guard(s.Redis, s.Log, window, api.PerIP(s), api.PerUser(s))
		v1.Post("/events", api.RequireRole(domain.RoleAdmin), h.create)
		v1.Get("/events/:eventId/seats", h.seats)
		v1.Post("/events/:eventId/seats/fcfs", grabs, h.fcfs)
		v1.Get("/public/events/:eventId", api.LimitPerIP(s), h.public)
		v1.Get("/public/events/:eventId/stream", api.LimitPerIP(s), h.stream)
		v1.Post("/events/:eventId/queue", api.LimitPerIP(s), h.enterQueue)
		v1.Get("/events/:eventId/queue/status", h.queueStatus)
		v1.Post("/events/:eventId/queue/token", h.issueToken)
		v1.Delete("/events/:eventId/queue/token", h.leave)
		v1.Post("/events/:eventId/seats/:seatId/reservation", writes, h.book)
	}
}

// Worker returns the events write types and counters for worker.Run; the
// entry-token secret is JWT_SECRET.
func Worker(fcfsLockWait, reconcileEvery time.Duration, secret string) worker.Types {
	return func(st *storage.Stores) worker.Module {
		counts := NewCounts(st.Pool, st.Redis)
		f := NewFCFS(fcfsLockWait)
		f.Counts = counts
		rw := &RoomWrites{Room: NewRoom(st.Redis, secret), Counts: counts}
		return worker.Module{
			Types:      append([]keyed.Type{f.Type()}, rw.Types()...),
			Collectors: append([]prometheus.Collector{f.Outcomes}, counts.Collectors()...),
			Periodic: []worker.Periodic{{Type: TypeReconcile, Every: reconcileEvery,
				Handle: func(ctx context.Context) error { return counts.Reconcile(ctx, time.Now()) }}},
		}
	}
}

type handlers struct {
	catalog *Catalog
	s       *api.Server
	room    *Room
	counts  *Counts
	events  sync.Map // event id → cachedEvent: settings never change after creation
}

type cachedEvent struct {
	e  Event
	at time.Time
}

func (h *handlers) create(c *fiber.Ctx) error {
	var in struct {
		Name                   string   `json:"name"`
		SeatCount              *int     `json:"seatCount"`
		Seats                  []string `json:"seats"`
		MaxConcurrent          *int     `json:"maxConcurrent"`
		TokenTTLSeconds        *int     `json:"tokenTtlSeconds"`
		EntryTokenRequired     *bool    `json:"entryTokenRequired"`
		FCFSEntryTokenRequired *bool    `json:"fcfsEntryTokenRequired"`
	}
	if err := api.Decode(c, &in); err != nil {
		return err
	}
	if err := api.RequireName("name", in.Name); err != nil {
		return err
	}
	e := Event{Name: in.Name, MaxConcurrent: 800, TokenTTLSeconds: 300, EntryTokenRequired: true}
	switch {
	case in.SeatCount != nil && in.Seats != nil:
		return api.InvalidField("seats", "send seatCount or seats, not both")
	case in.SeatCount != nil:
		if *in.SeatCount < 0 || *in.SeatCount > MaxSeats {
			return api.InvalidField("seatCount", "seatCount must be between 0 and %d", MaxSeats)
		}
		e.TotalSeats = *in.SeatCount
	case in.Seats != nil:
		if len(in.Seats) > MaxSeats {
			return api.InvalidField("seats", "at most %d seats", MaxSeats)
		}
		seen := make(map[string]bool, len(in.Seats))
		for _, l := range in.Seats {
			if strings.TrimSpace(l) == "" || len(l) > 32 || seen[l] {
				return api.InvalidField("seats", "seat labels must be unique, 1 to 32 characters")
			}
			seen[l] = true
		}
	default:
		return api.InvalidField("seatCount", "send seatCount or seats")
	}
	if in.MaxConcurrent != nil {
		if *in.MaxConcurrent < 1 || *in.MaxConcurrent > 1_000_000 {
			return api.InvalidField("maxConcurrent", "maxConcurrent must be between 1 and 1000000")
		}
		e.MaxConcurrent = *in.MaxConcurrent
	}
	if in.TokenTTLSeconds != nil {
		if *in.TokenTTLSeconds < 1 || *in.TokenTTLSeconds > 86400 {
			return api.InvalidField("tokenTtlSeconds", "tokenTtlSeconds must be between 1 and 86400")
		}
		e.TokenTTLSeconds = *in.TokenTTLSeconds
	}
	if in.EntryTokenRequired != nil {
		e.EntryTokenRequired = *in.EntryTokenRequired
	}
	if in.FCFSEntryTokenRequired != nil {
		e.FCFSEntryTokenRequired = *in.FCFSEntryTokenRequired
	}
	e, err := h.catalog.CreateEvent(c.UserContext(), e, in.Seats)
	if err != nil {
		return err
	}
	return c.Status(http.StatusCreated).JSON(e)
}

func (h *handlers) public(c *fiber.Ctx) error {
	id, err := api.PathID(c, "eventId")
	if err != nil {
		return err
	}
	e, err := h.eventByID(c.UserContext(), id)
	if err != nil {
		return err
	}
	n, err := h.counts.Remaining(c.UserContext(), id)
	if err != nil {
		return err
	}
	return c.JSON(Public{EventID: id, Name: e.Name, TotalSeats: e.TotalSeats, RemainingSeats: int(n)})
}

func (h *handlers) seats(c *fiber.Ctx) error {
	id, err := api.PathID(c, "eventId")
	if err != nil {
		return err
	}
	status := c.Query("status")
	switch status {
	case "", "all":
		status = ""
	case "available", "reserved":
	default:
		return domain.NewProblem(http.StatusBadRequest, domain.CodeInvalidFilter, "status must be available, reserved or all")
	}
	seats, err := h.catalog.Seats(c.UserContext(), id, status)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"items": seats})
}

func (h *handlers) fcfs(c *fiber.Ctx) error {
	p, err := h.fcfsPayload(c)
	if err != nil {
		return err
	}
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return h.s.Accept(c, requests.Submission{Type: TypeFCFS, Queue: Queue, Keys: []string{EventKey(p.EventID)}, Payload: body})
}

// fcfsPayload validates an FCFS request, reading nothing but the cached
// event and the waiting room's token: the event exists, the caller may
// enter, the phone is E.164.
func (h *handlers) fcfsPayload(c *fiber.Ctx) (FCFSPayload, error) {
	id, err := api.PathID(c, "eventId")
	if err != nil {
		return FCFSPayload{}, err
	}
	var in struct {
		Phone *string `json:"phone"`
	}
	if err := api.Decode(c, &in); err != nil {
		return FCFSPayload{}, err
	}
	p := FCFSPayload{EventID: id}
	e, err := h.eventByID(c.UserContext(), id)
	if err != nil {
		return FCFSPayload{}, err
	}
	if e.FCFSEntryTokenRequired {
		if err := h.requireEntry(c, e); err != nil {
			return FCFSPayload{}, err
		}
	}
	if in.Phone != nil {
		if !e164.MatchString(*in.Phone) {
			return FCFSPayload{}, domain.NewProblem(http.StatusBadRequest, domain.CodeInvalidPhone,
				"phone must be in E.164 form, such as +821012345678").WithMeta("field", "phone")
		}
		p.Phone = *in.Phone
	}
	return p, nil
}

// fcfsClaim is the duplicate-window key of an FCFS request: its event and
// user. A retry carrying an Idempotency-Key is a replay, not a duplicate,
// and a path that names no event is left to the handler's 404.
func fcfsClaim(c *fiber.Ctx) string {
	if c.Get(api.IdempotencyHeader) != "" {
		return ""
	}
	id, err := api.PathID(c, "eventId")
	if err != nil {
		return ""
	}
	return "hf:dup:fcfs:" + strconv.FormatInt(id, 10) + ":" + api.Principal(c).UserID
}

func (h *handlers) event(c *fiber.Ctx) (Event, error) {
	id, err := api.PathID(c, "eventId")
	if err != nil {
		return Event{}, err
	}
	return h.eventByID(c.UserContext(), id)
}

// eventByID reads an event's settings, from a cache of a few seconds: the
// write paths of a rush read them on every request.
func (h *handlers) eventByID(ctx context.Context, id int64) (Event, error) {
	if v, ok := h.events.Load(id); ok && time.Since(v.(cachedEvent).at) < 5*time.Second {
		return v.(cachedEvent).e, nil
	}
	e, err := h.catalog.Event(ctx, id)
	if err == nil {
		h.events.Store(id, cachedEvent{e: e, at: time.Now()})
	}
	return e, err
}

func (h *handlers) enterQueue(c *fiber.Ctx) error {
	id, err := api.PathID(c, "eventId")
	if err != nil {
		return err
	}
	if len(c.Body()) > 0 {
		if err := api.Decode(c, &struct{}{}); err != nil {
			return err
		}
	}
	body, err := json.Marshal(QueuePayload{EventID: id})
	if err != nil {
		return err
	}
	return h.s.Accept(c, requests.Submission{Type: TypeQueueEnter, Queue: Queue, Keys: []string{QueueKey(id)}, Payload: body})
}

func (h *handlers) queueStatus(c *fiber.Ctx) error {
	e, err := h.event(c)
	if err != nil {
		return err
	}
	st, err := h.room.Status(c.UserContext(), e, api.Principal(c).UserID, time.Now())
	if err != nil {
		return err
	}
	return c.JSON(st)
}

func (h *handlers) issueToken(c *fiber.Ctx) error {
	e, err := h.event(c)
	if err != nil {
		return err
	}
	tok, exp, rank, ok, err := h.room.Issue(c.UserContext(), e, api.Principal(c).UserID, time.Now())
	if errors.Is(err, ErrNotQueued) {
		return domain.NewProblem(http.StatusConflict, domain.CodeNotYourTurn, "join the queue first").WithMeta("status", "not_queued")
	}
	if err != nil {
		return err
	}
	if !ok {
		return domain.NewProblem(http.StatusConflict, domain.CodeNotYourTurn, "it is not your turn yet").
			WithMeta("rank", rank).WithMeta("aheadCount", rank)
	}
	return c.JSON(fiber.Map{"entryToken": tok, "expiresAt": exp})
}

func (h *handlers) leave(c *fiber.Ctx) error {
	e, err := h.event(c)
	if err != nil {
		return err
	}
	if err := h.room.Leave(c.UserContext(), e.EventID, api.Principal(c).UserID); err != nil {
		return err
	}
	return c.JSON(fiber.Map{"left": true})
}

// EntryTokenHeader carries the waiting room's entry token to seat booking.
const EntryTokenHeader = "X-Entry-Token"

func (h *handlers) book(c *fiber.Ctx) error {
	e, err := h.event(c)
	if err != nil {
		return err
	}
	seat, err := api.PathID(c, "seatId")
	if err != nil {
		return err
	}
	if len(c.Body()) > 0 {
		if err := api.Decode(c, &struct{}{}); err != nil {
			return err
		}
	}
	if e.EntryTokenRequired {
		if err := h.requireEntry(c, e); err != nil {
			return err
		}
	}
	body, err := json.Marshal(BookPayload{EventID: e.EventID, SeatID: seat})
	if err != nil {
		return err
	}
	return h.s.Accept(c, requests.Submission{Type: TypeSeatBook, Queue: Queue, Keys: []string{EventKey(e.EventID)}, Payload: body})
}

// requireEntry refuses a request without a valid entry token of this event
// and caller, whose slot is still held.
func (h *handlers) requireEntry(c *fiber.Ctx, e Event) error {
	user := api.Principal(c).UserID
	tok := c.Get(EntryTokenHeader)
	valid := tok != "" && h.room.VerifyToken(tok, e.EventID, user)
	if valid {
		var err error
		if valid, err = h.room.Valid(c.UserContext(), e.EventID, user, time.Now()); err != nil {
			return err
		}
	}
	if !valid {
		return domain.NewProblem(http.StatusForbidden, domain.CodeEntryTokenRequired,
			"a valid entry token from the waiting room is required (header %s)", EntryTokenHeader)
	}
	return nil
}

// stream sends the event's remaining seats as Server-Sent Events: one now,
// then one whenever the count changes (checked every 500 ms), with a comment
// line as a keep-alive every 5 s, until the client goes away (a write fails)
// or the server shuts down.
func (h *handlers) stream(c *fiber.Ctx) error {
	id, err := api.PathID(c, "eventId")
	if err != nil {
		return err
	}
	if _, err := h.eventByID(c.UserContext(), id); err != nil {
		return err
	}
	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set(fiber.HeaderConnection, "keep-alive")
	counts, shutdown := h.counts, c.Context().Done()
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		ctx := context.Background()
		last := int64(-1)
		beat := time.Now()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			n, err := counts.Remaining(ctx, id)
			switch {
			case err == nil && n != last:
				last = n
				if _, err := fmt.Fprintf(w, "event: remaining\ndata: {\"eventId\":%d,\"remainingSeats\":%d}\n\n", id, n); err != nil || w.Flush() != nil {
					return
				}
			case time.Since(beat) > 5*time.Second:
				beat = time.Now()
				if _, err := w.WriteString(": keep-alive\n\n"); err != nil || w.Flush() != nil {
					return
				}
			}
			select {
			case <-shutdown:
				return
			case <-tick.C:
			}
		}
	})
	return nil
}
