// Package baseline is the comparison point for `make bench`: each vertical's
// rush built the strongest way a team would build it without holdfast,
// synchronously, one Postgres transaction per HTTP request answered with its
// outcome. The lean mode is seed 004's first-come-first-served seat grab as
// one statement a request (lean.go); the cart mode seed 002's order reserve
// (cart.go); the hold mode seed 000's locked hold flow (hold.go); the group
// mode best-available seat holds for groups (group.go). It is not part of
// holdfast and never runs in production.
package baseline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Mode selects what the server does.
type Mode string

const (
	// Lean is the strongest synchronous first-come-first-served design:
	// one UPDATE … FOR UPDATE SKIP LOCKED as the whole request, with no
	// lookup before it and no retry, on Go's net/http server (lean.go), in
	// a schema of its own (Setup).
	Lean Mode = "lean"
	// Cart is seed 002's order reserve done synchronously, one transaction
	// per HTTP request that locks the cart's options (see cart.go), in a
	// schema of its own (SetupCart).
	Cart Mode = "cart"
	// Holds is seed 000's hold flow done synchronously, one transaction per
	// HTTP request that locks the room type's stock rows for the stay's
	// nights (see hold.go), in a schema of its own (SetupHold).
	Holds Mode = "hold"
	// Group is best-available seat holds for groups done synchronously, one
	// transaction per HTTP request that locks a row of the seat map FOR
	// UPDATE SKIP LOCKED (see group.go), in a schema of its own
	// (SetupGroup).
	Group Mode = "group"
)

// ParseMode reads a mode name.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Lean, Cart, Holds, Group:
		return m, nil
	}
	return "", fmt.Errorf("baseline: unknown mode %q (want lean, cart, hold or group)", s)
}

const (
	// ReservePath is the seed's endpoint.
	ReservePath = "/api/v1/seats/reservation/fcfs"
	// UserHeader names the caller; it is what reserved_by records.
	UserHeader = "X-User-Id"
)

// Reason says why a reservation did not succeed (seed §6).
type Reason string

// The seed's reason codes.
const (
	SoldOut         Reason = "sold_out"
	AlreadyReserved Reason = "already_reserved"
)

// Reply is the seed's §5 answer, always sent with 200.
type Reply struct {
	Success    bool    `json:"success"`
	SeatID     *int64  `json:"seat_id"`
	ReservedBy *string `json:"reserved_by"`
	Reason     *Reason `json:"reason"`
}

// Options configure a Server. Zero values take the defaults.
type Options struct {
	Mode            Mode          // required
	Schema          string        // Postgres schema of the mode's tables (DefaultSchema, DefaultCartSchema, DefaultHoldSchema, DefaultGroupSchema)
	HoldTTL         time.Duration // the hold mode's hold lifetime; default DefaultHoldTTL
	ShutdownTimeout time.Duration // default 10s
	Log             *slog.Logger  // 5xx answers are logged here; nil discards
}

// Server is the baseline's HTTP server.
type Server struct {
	opt   Options
	pool  *pgxpool.Pool
	app   *fiber.App   // the cart, hold and group modes
	sql   queries      // lean mode
	cart  cartQueries  // cart mode
	holds holdQueries  // hold mode
	group groupQueries // group mode
	// beforeInsert, when set, runs in a reserve whose cart fits, or a hold
	// that fits, before its INSERT: the tests' barrier.
	beforeInsert func(user string)
}

// queries are the lean mode's statements, with the schema spelled out so
// that they do not depend on the connection's search_path.
type queries struct {
	seatOf string // the seat a user holds
	take   string // the first free seat no one else holds, reserved
}

func newQueries(schema string) queries {
	seats := pgx.Identifier{schema, "seats"}.Sanitize()
	return queries{
		seatOf: `SELECT id FROM ` + seats + ` WHERE reserved_by = $1 AND status`,
		take: `UPDATE ` + seats + ` SET status = true, reserved_by = $1, phone = $2, updated_at = now()
			WHERE id = (SELECT id FROM ` + seats + ` WHERE status = false ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
			AND status = false RETURNING id`,
	}
}

// New builds the server on pool, which holds the mode's schema.
func New(pool *pgxpool.Pool, opt Options) (*Server, error) {
	if _, err := ParseMode(string(opt.Mode)); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, fmt.Errorf("baseline: mode %s needs Postgres", opt.Mode)
	}
	if opt.Schema == "" {
		opt.Schema = map[Mode]string{Lean: DefaultSchema, Cart: DefaultCartSchema, Holds: DefaultHoldSchema, Group: DefaultGroupSchema}[opt.Mode]
	}
	if opt.HoldTTL <= 0 {
		opt.HoldTTL = DefaultHoldTTL
	}
	if opt.ShutdownTimeout <= 0 {
		opt.ShutdownTimeout = 10 * time.Second
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{opt: opt, pool: pool}
	if opt.Mode == Lean {
		s.sql = newQueries(opt.Schema)
		return s, nil
	}
	s.app = fiber.New(fiber.Config{
		AppName:               "holdfast-baseline",
		DisableStartupMessage: true,
		ErrorHandler:          s.errorHandler,
	})
	s.app.Use(recover.New())
	s.app.Get("/healthz", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ok"}) })
	s.app.Get("/metrics", adaptor.HTTPHandler(processMetrics()))
	switch opt.Mode {
	case Cart:
		s.cart = newCartQueries(opt.Schema, allLocks)
		s.mountCart()
	case Holds:
		s.holds = newHoldQueries(opt.Schema, true)
		s.mountHold()
	default:
		s.group = newGroupQueries(opt.Schema)
		s.mountGroup()
	}
	return s, nil
}

// processMetrics serves the process collector only: make bench reads the
// server's CPU and memory from it, as it does for holdfast's API.
func processMetrics() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// Serve answers on ln until ctx ends, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if s.opt.Mode == Lean {
		return s.serveLean(ctx, ln)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.app.Listener(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.opt.ShutdownTimeout)
	defer cancel()
	if err := s.app.ShutdownWithContext(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return <-errc
}

// seatOf returns the seat the user holds, or nil.
func (s *Server) seatOf(ctx context.Context, user string) (*int64, error) {
	var id int64
	err := s.pool.QueryRow(ctx, s.sql.seatOf, user).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("baseline: find user's seat: %w", err)
	}
	return &id, nil
}

// alreadyReserved answers with the user's seat; seat_id is null if a unique
// violation left no seat to show (not expected: the violation waits for the
// winning transaction to commit).
func alreadyReserved(seat *int64, user string) Reply {
	return Reply{SeatID: seat, ReservedBy: &user, Reason: ptr(AlreadyReserved)}
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// errorHandler answers errors in the seed's §5.5 envelope and logs 5xx.
func (s *Server) errorHandler(c *fiber.Ctx, err error) error {
	status, code, msg := fiber.StatusInternalServerError, "internal_error", err.Error()
	var fe *fiber.Error
	switch {
	case errors.As(err, &fe) && fe.Code < 500:
		status, msg = fe.Code, fe.Message
		code = "validation_failed"
		if fe.Code == fiber.StatusNotFound || fe.Code == fiber.StatusMethodNotAllowed {
			code = "not_found"
		}
	default:
		s.opt.Log.Error("baseline: request failed", "method", c.Method(), "path", c.Path(), "err", err)
	}
	return c.Status(status).JSON(fiber.Map{"error": fiber.Map{"code": code, "message": msg}})
}

func ptr[T any](v T) *T { return &v }
