package events

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
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
		h := &handlers{catalog: NewCatalog(s.Pool), s: s, window: duplicateWindow}
		cfg := s.Config()
		perUser := api.RateLimit(s.Redis, s.Log, "user", cfg.RateLimitPerUser, func(c *fiber.Ctx) string { return api.Principal(c).UserID })
		v1.Post("/events", api.RequireRole(domain.RoleAdmin), h.create)
		v1.Get("/events/:eventId/seats", h.seats)
		v1.Post("/events/:eventId/seats/fcfs", api.LimitPerIP(s), perUser, h.fcfs)
		v1.Get("/public/events/:eventId", api.LimitPerIP(s), h.public)
	}
}

// Worker returns the events write types and counters for worker.Run.
func Worker(fcfsLockWait time.Duration) worker.Types {
	return func(*storage.Stores) worker.Module {
		f := NewFCFS(fcfsLockWait)
		return worker.Module{Types: []keyed.Type{f.Type()}, Collectors: []prometheus.Collector{f.Outcomes}}
	}
}

type handlers struct {
	catalog *Catalog
	s       *api.Server
	window  time.Duration
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
	if strings.TrimSpace(in.Name) == "" || len(in.Name) > 200 {
		return api.InvalidField("name", "name must be 1 to 200 characters")
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
	p, err := h.catalog.Public(c.UserContext(), id)
	if err != nil {
		return err
	}
	return c.JSON(p)
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
	id, err := api.PathID(c, "eventId")
	if err != nil {
		return err
	}
	var in struct {
		Phone *string `json:"phone"`
	}
	if err := api.Decode(c, &in); err != nil {
		return err
	}
	p := FCFSPayload{EventID: id}
	if in.Phone != nil {
		if !e164.MatchString(*in.Phone) {
			return domain.NewProblem(http.StatusBadRequest, domain.CodeInvalidPhone,
				"phone must be in E.164 form, such as +821012345678").WithMeta("field", "phone")
		}
		p.Phone = *in.Phone
	}
	// Seed 004 §9's dup:req: one request per user and event per window.
	if h.window > 0 {
		user := api.Principal(c).UserID
		fresh, err := h.s.Redis.SetNX(c.UserContext(), "hf:dup:fcfs:"+strconv.FormatInt(id, 10)+":"+user, 1, h.window).Result()
		if err != nil {
			return err
		}
		if !fresh {
			wait := max(1, int(h.window.Seconds()+0.999))
			return domain.NewProblem(http.StatusTooManyRequests, domain.CodeDuplicateRequest,
				"you sent this request a moment ago; wait for its outcome").WithMeta("retryAfterSeconds", wait)
		}
	}
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return h.s.Accept(c, requests.Submission{Type: TypeFCFS, Queue: Queue, Keys: []string{EventKey(id)}, Payload: body})
}
