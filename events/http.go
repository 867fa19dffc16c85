package events

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/api"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/requests"
)

// MaxSeats bounds the seats of one event.
const MaxSeats = 100_000

var e164 = regexp.MustCompile(`^\+[1-9][0-9]{1,14}$`)

// Deps are what the events routes use.
type Deps struct {
	Pool  *pgxpool.Pool
	Redis redis.UniversalClient // the waiting room, counts and rate limits
	Log   *slog.Logger
	// Registry takes the waiting room's metrics.
	Registry prometheus.Registerer
	// Writes accepts the FCFS, queue, seat and hold writes.
	Writes api.Writes
	// Limits guard the public reads, the queue and the writes.
	Limits api.Limits
	// IssueTicket mints a position stream's ticket (api.Server.IssueTicket).
	IssueTicket func(c *fiber.Ctx, path string) (api.Ticket, error)
	// Pages is the router the waiting-room pages go on (api.Server.Root).
	Pages fiber.Router
	// Secret signs entry tokens (JWT_SECRET); DuplicateWindow is seed 004
	// §9's window of one FCFS request per user and event (DUPLICATE_WINDOW).
	Secret          string
	DuplicateWindow time.Duration
}

// Mount adds the events routes to v1 (api.Server.V1) and the pages to
// d.Pages.
func Mount(v1 fiber.Router, d Deps) {
	d.Writes.DeclareWrites(Queue, TypeFCFS, TypeQueueEnter, TypeSeatBook, TypeSeatHold, TypeHoldConfirm, TypeHoldRelease)
	room := NewRoom(d.Redis, d.Secret)
	d.Registry.MustRegister(room.Collectors()...)
	h := &handlers{catalog: NewCatalog(d.Pool), writes: d.Writes, log: d.Log, issueTicket: d.IssueTicket,
		room: room, counts: NewCounts(d.Pool, d.Redis), sealer: NewSealer(d.Pool, room)}
	h.positions = newPositions(room, h.sealer, h.eventByID, d.Log)
	writes, public := d.Limits.Writes(), d.Limits.Public()
	// Seed 004 §9's dup:req: one FCFS request per user and event per
	// window, claimed in the same round trip as the rate limits. A
	// repeat that is itself invalid gets its own 4xx, not the 429.
	grabs := d.Limits.Guard(api.Window{Duration: d.DuplicateWindow, Key: fcfsClaim,
		Valid: func(c *fiber.Ctx) error { _, err := h.fcfsPayload(c); return err }})
	v1.Post("/events", api.RequireRole(domain.RoleAdmin), h.create)
	v1.Patch("/events/:eventId", api.RequireRole(domain.RoleAdmin), h.patch)
	v1.Get("/events/:eventId/seats", h.seats)
	v1.Post("/events/:eventId/seats/fcfs", grabs, h.fcfs)
	v1.Get("/public/events/:eventId", public, h.public)
	v1.Get("/public/events/:eventId/stream", public, h.stream)
	v1.Get("/public/events/:eventId/prequeue", public, h.prequeue)
	v1.Post("/events/:eventId/queue", public, h.enterQueue)
	v1.Get("/events/:eventId/queue/status", h.queueStatus)
	v1.Post("/events/:eventId/queue/ticket", h.ticket)
	v1.Get("/events/:eventId/queue/stream", public, h.positionStream)
	v1.Post("/events/:eventId/queue/token", h.issueToken)
	v1.Delete("/events/:eventId/queue/token", h.leave)
	v1.Post("/events/:eventId/seats/:seatId/reservation", writes, h.book)
	v1.Get("/events/:eventId/holds", h.holds)
	v1.Post("/events/:eventId/holds", writes, h.hold)
	v1.Post("/events/:eventId/holds/:holdId/confirm", writes, h.confirmHold)
	v1.Delete("/events/:eventId/holds/:holdId", writes, h.releaseHold)
	Pages(d.Pages)
}

type handlers struct {
	catalog     *Catalog
	writes      api.Writes
	log         *slog.Logger
	issueTicket func(c *fiber.Ctx, path string) (api.Ticket, error)
	room        *Room
	counts      *Counts
	sealer      *Sealer
	positions   *positions
	// events caches each event's settings for eventCacheTTL: the write
	// paths of a rush read them on every request. A PATCH here drops the
	// entry; other API processes see a change within the TTL (the
	// admission settings themselves are read from Redis by every script).
	// Bounded by the events read within the TTL: stale entries are dropped
	// as new ones are stored.
	events sync.Map // event id → cachedEvent
}

const eventCacheTTL = 5 * time.Second

type cachedEvent struct {
	e  Event
	at time.Time
}

func (h *handlers) create(c *fiber.Ctx) error {
	var in struct {
		Name      string   `json:"name"`
		SeatCount *int     `json:"seatCount"`
		Seats     []string `json:"seats"`
		Sections  SeatMap  `json:"sections"`
		settingsInput
	}
	if err := api.Decode(c, &in); err != nil {
		return err
	}
	if err := api.RequireName("name", in.Name); err != nil {
		return err
	}
	e := newEventSettings()
	e.Name = in.Name
	var m SeatMap
	switch {
	case (in.SeatCount != nil) && (in.Seats != nil) || (in.SeatCount != nil || in.Seats != nil) && in.Sections != nil:
		return api.InvalidField("seats", "send one of seatCount, seats and sections")
	case in.Sections != nil:
		n, err := in.Sections.check()
		if err != nil {
			return err
		}
		e.TotalSeats, m = n, in.Sections
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
		m = plainMap(in.Seats)
	default:
		return api.InvalidField("seatCount", "send seatCount, seats or sections")
	}
	e, err := in.apply(e, time.Now(), true)
	if err != nil {
		return err
	}
	if e, err = h.catalog.CreateEvent(c.UserContext(), e, m); err != nil {
		return err
	}
	// Best effort: a room whose settings are missing from Redis has them
	// put back by its first script.
	_ = h.room.Configure(c.UserContext(), e)
	return c.Status(http.StatusCreated).JSON(e)
}

// patch changes an event's settings (admin). Admission settings reach every
// API and worker at once through Redis; the waiting room applies them from
// its next script on.
func (h *handlers) patch(c *fiber.Ctx) error {
	id, err := api.PathID(c, "eventId")
	if err != nil {
		return err
	}
	var in settingsInput
	if err := api.Decode(c, &in); err != nil {
		return err
	}
	e, err := h.catalog.UpdateSettings(c.UserContext(), id, func(cur Event, now time.Time) (Event, error) {
		return in.apply(cur, now, false)
	})
	if err != nil {
		return err
	}
	h.events.Delete(id)
	if err := h.room.Configure(c.UserContext(), e); err != nil {
		return err
	}
	return c.JSON(e)
}

func (h *handlers) public(c *fiber.Ctx) error {
	id, err := api.PathID(c, "eventId")
	if err != nil {
		return err
	}
	e, err := h.eventByID(c.UserContext(), id)
	if err == nil && e.SalesStartAt != nil && e.sealedAt == nil {
		// The seed is shown once sealed (Event.public), which the cached
		// copy may not know yet; the room's settings know it at once.
		var sealed bool
		if sealed, err = h.room.Sealed(c.UserContext(), id); sealed {
			e, err = h.loadEvent(c.UserContext(), id)
		}
	}
	if err != nil {
		return err
	}
	n, err := h.counts.Remaining(c.UserContext(), id)
	if err != nil {
		return err
	}
	return c.JSON(e.public(int(n)))
}

// prequeue lists the pre-queue's entrants in entry order, a page at a time,
// with what a verifier needs beside them (package draw). The list is shown
// once the pre-queue is sealed, complete: before, anyone who spotted its
// own pseudonym (the newest entry) and sorted the list would know its place
// in the draw before the start, and could keep its best account's.
func (h *handlers) prequeue(c *fiber.Ctx) error {
	id, err := api.PathID(c, "eventId")
	if err != nil {
		return err
	}
	offset, err := queryInt(c, "offset", 0, 0, math.MaxInt32)
	if err != nil {
		return err
	}
	limit, err := queryInt(c, "limit", maxPrequeuePage, 1, maxPrequeuePage)
	if err != nil {
		return err
	}
	e, err := h.catalog.Event(c.UserContext(), id)
	if err != nil {
		return err
	}
	sealed := e.sealedAt != nil
	if !sealed {
		limit = 0
	}
	page, total, err := h.catalog.PrequeueEntrants(c.UserContext(), id, offset, limit)
	if err != nil {
		return err
	}
	pub := e.public(0)
	out := PrequeuePage{EventID: id, SalesStartAt: e.SalesStartAt, Sealed: sealed,
		ShuffleCommitment: e.ShuffleCommitment, ShuffleSeed: pub.ShuffleSeed, Total: total, Entrants: page}
	if next := offset + len(page); sealed && next < total {
		out.NextOffset = &next
	}
	return c.JSON(out)
}

// queryInt reads an integer query parameter between lo and hi, def when
// absent; anything else is a 400 naming it.
func queryInt(c *fiber.Ctx, name string, def, lo, hi int) (int, error) {
	v := c.Query(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, api.InvalidField(name, "%s must be an integer between %d and %d", name, lo, hi)
	}
	return n, nil
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
	case "available", "held", "reserved":
	default:
		return domain.NewProblem(domain.CodeInvalidFilter, "status must be available, held, reserved or all")
	}
	seats, sections, err := h.catalog.Seats(c.UserContext(), id, status)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"items": seats, "sections": sections})
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
	return h.writes.Accept(c, requests.Submission{Type: TypeFCFS, Queue: Queue, Keys: []string{EventKey(p.EventID)}, Payload: body})
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
			return FCFSPayload{}, domain.NewProblem(domain.CodeInvalidPhone,
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
	if v, ok := h.events.Load(id); ok && time.Since(v.(cachedEvent).at) < eventCacheTTL {
		return v.(cachedEvent).e, nil
	}
	return h.loadEvent(ctx, id)
}

// loadEvent reads an event's settings from Postgres into the cache.
func (h *handlers) loadEvent(ctx context.Context, id int64) (Event, error) {
	e, err := h.catalog.Event(ctx, id)
	if err == nil {
		now := time.Now()
		h.events.Range(func(k, v any) bool {
			if now.Sub(v.(cachedEvent).at) > eventCacheTTL {
				h.events.Delete(k)
			}
			return true
		})
		h.events.Store(id, cachedEvent{e: e, at: now})
	}
	return e, err
}

// enterQueue accepts a queue entry. The event must exist and its queue be
// open; the worker checks the latter again by the acceptance time.
func (h *handlers) enterQueue(c *fiber.Ctx) error {
	e, err := h.event(c)
	if err != nil {
		return err
	}
	if len(c.Body()) > 0 {
		if err := api.Decode(c, &struct{}{}); err != nil {
			return err
		}
	}
	if !e.queueOpen(time.Now()) {
		return queueNotOpen(e)
	}
	body, err := json.Marshal(QueuePayload{EventID: e.EventID})
	if err != nil {
		return err
	}
	return h.writes.Accept(c, requests.Submission{Type: TypeQueueEnter, Queue: Queue, Keys: []string{QueueKey(e.EventID)}, Payload: body})
}

// sealIfDue tries to seal e's pre-queue when st says admissions wait for
// it, and reports whether it is sealed now: st is then out of date, and the
// caller reads again. A failure is only logged: the caller's answer stands,
// and the next poll, stream tick or periodic task tries again.
func (h *handlers) sealIfDue(ctx context.Context, e Event, st Status) bool {
	if st.reason != "prequeue" {
		return false
	}
	sealed, err := h.sealer.TrySeal(ctx, e, time.Now())
	if err != nil {
		h.log.WarnContext(ctx, "could not seal the pre-queue", "event", e.EventID, "err", err)
	}
	return sealed && err == nil
}

// queueStatus answers where the caller stands. A read that finds the
// pre-queue's seal due seals it and reads again: from the seal on, every
// answer carries the caller's place, that read's included.
func (h *handlers) queueStatus(c *fiber.Ctx) error {
	e, err := h.event(c)
	if err != nil {
		return err
	}
	user := api.Principal(c).UserID
	st, err := h.room.Status(c.UserContext(), e, user)
	if err == nil && h.sealIfDue(c.UserContext(), e, st) {
		st, err = h.room.Status(c.UserContext(), e, user)
	}
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
	user := api.Principal(c).UserID
	a, err := h.room.Issue(c.UserContext(), e, user)
	if err == nil && a.Token == "" && h.sealIfDue(c.UserContext(), e, a.Status) {
		a, err = h.room.Issue(c.UserContext(), e, user)
	}
	var nq ErrNotQueued
	if errors.As(err, &nq) {
		msg := "join the queue first"
		if nq.Status == "expired" {
			msg = "you lost your place in line (no sign of life, or your turn was not taken in time); join again"
		}
		return domain.NewProblem(domain.CodeNotYourTurn, "%s", msg).WithMeta("status", nq.Status)
	}
	if err != nil {
		return err
	}
	if a.Token == "" {
		return notYourTurn(a.Status)
	}
	return c.JSON(fiber.Map{"entryToken": a.Token, "expiresAt": a.Expires})
}

// notYourTurn says why a user in line may not take a token yet.
func notYourTurn(st Status) *domain.Problem {
	full := "it is not your turn yet: every admission slot is taken, and the users ahead of you go first"
	if st.Rank != nil && *st.Rank == 0 {
		full = "you are first in line: your turn comes when an admitted user books a seat, leaves or lets the entry lapse (every admission slot is taken)"
	}
	msg := map[string]string{
		"full":     full,
		"rate":     "it is not your turn yet: the admission rate of this minute is reached",
		"paused":   "admissions are paused; you keep your place",
		"prequeue": "the sale has not started; your place is drawn at the start",
		"sold_out": "every seat is taken for now; you keep your place, and seats that others release or let expire go to the line in order",
	}[st.reason]
	p := domain.NewProblem(domain.CodeNotYourTurn, "%s", msg).
		WithMeta("status", st.Status).WithMeta("reason", st.reason)
	if st.Rank != nil {
		p = p.WithMeta("rank", *st.Rank).WithMeta("aheadCount", *st.AheadCount)
	}
	return p
}

func (h *handlers) leave(c *fiber.Ctx) error {
	e, err := h.event(c)
	if err != nil {
		return err
	}
	if err := h.room.Leave(c.UserContext(), e, api.Principal(c).UserID); err != nil {
		return err
	}
	return c.JSON(fiber.Map{"left": true})
}

// ticket exchanges the caller's bearer token for a ticket that opens its
// position stream once (browsers' EventSource cannot send headers).
func (h *handlers) ticket(c *fiber.Ctx) error {
	e, err := h.event(c)
	if err != nil {
		return err
	}
	t, err := h.issueTicket(c, fmt.Sprintf("/api/v1/events/%d/queue/stream", e.EventID))
	if err != nil {
		return err
	}
	return c.JSON(t)
}

// positionStream streams the caller's waiting-room status as Server-Sent
// Events (positions), authenticated by a bearer token or a ticket.
func (h *handlers) positionStream(c *fiber.Ctx) error {
	e, err := h.event(c)
	if err != nil {
		return err
	}
	member := e.member(api.Principal(c).UserID)
	release, ok := h.positions.open(e.EventID, member)
	if !ok {
		return domain.NewProblem(domain.CodeRateLimited,
			"at most %d position streams of one user at once; close one", maxStreamsPerUser).WithMeta("retryAfterSeconds", 5)
	}
	first, err := h.positions.statuses(c.UserContext(), e, []string{member})
	if err != nil {
		release()
		return err
	}
	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set("X-Accel-Buffering", "no") // a proxy must not hold events back
	done := c.Context().Done()
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer release()
		h.positions.serve(w, e, member, first[0], done)
	})
	return nil
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
	// Another event's seat is refused here, at once, rather than accepted
	// and rejected by the worker. The worker checks again, in its
	// transaction.
	if ok, err := h.catalog.HasSeat(c.UserContext(), e.EventID, seat); err != nil {
		return err
	} else if !ok {
		return domain.NewProblem(domain.CodeNotFound, "seat %d is not a seat of event %d", seat, e.EventID)
	}
	body, err := json.Marshal(BookPayload{EventID: e.EventID, SeatID: seat})
	if err != nil {
		return err
	}
	return h.writes.Accept(c, requests.Submission{Type: TypeSeatBook, Queue: Queue, Keys: []string{EventKey(e.EventID)}, Payload: body})
}

// requireEntry refuses a request without a valid entry token of this event
// and caller, whose slot is still held.
func (h *handlers) requireEntry(c *fiber.Ctx, e Event) error {
	user := api.Principal(c).UserID
	tok := c.Get(EntryTokenHeader)
	valid := tok != "" && h.room.VerifyToken(tok, e.EventID, user)
	if valid {
		var err error
		if valid, err = h.room.Valid(c.UserContext(), e, user); err != nil {
			return err
		}
	}
	if !valid {
		return domain.NewProblem(domain.CodeEntryTokenRequired,
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
