// Package baseline is the comparison point for `make bench`: each vertical's
// rush built the strongest way a team would build it without holdfast,
// synchronously, one Postgres transaction per HTTP request answered with its
// outcome. The lean mode is seed 004's first-come-first-served seat grab as
// one statement a request (lean.go); the cart mode seed 002's order reserve
// (cart.go); the hold mode seed 000's locked hold flow (hold.go); the group
// mode best-available seat holds for groups (group.go). Each serves only the
// writes its rush measures: a run's fixture is written into the mode's
// tables with SQL (fixtures.go), and its checks read them there. It is not
// part of holdfast and never runs in production.
package baseline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/holdfast/holdfast/domain"
)

// Mode selects what the server does.
type Mode string

const (
	// Lean is the strongest synchronous first-come-first-served design:
	// one UPDATE … FOR UPDATE SKIP LOCKED as the whole request, with no
	// lookup before it and no retry, on Go's net/http server (lean.go).
	Lean Mode = "lean"
	// Cart is seed 002's order reserve done synchronously, one transaction
	// per HTTP request that locks the cart's options (cart.go).
	Cart Mode = "cart"
	// Holds is seed 000's hold flow done synchronously, one transaction per
	// HTTP request that locks the room type's stock rows for the stay's
	// nights (hold.go).
	Holds Mode = "hold"
	// Group is best-available seat holds for groups done synchronously, one
	// transaction per HTTP request that locks a row of the seat map FOR
	// UPDATE SKIP LOCKED (group.go).
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

// UserHeader names the caller; it is what reserved_by and user_id record.
const UserHeader = "X-User-Id"

// Options configure a Server. Zero values take the defaults.
type Options struct {
	Mode            Mode          // required
	Schema          string        // Postgres schema of the mode's tables (Setup); default the mode's DefaultSchema
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

// New builds the server on pool, which holds the mode's schema.
func New(pool *pgxpool.Pool, opt Options) (*Server, error) {
	if _, err := ParseMode(string(opt.Mode)); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, fmt.Errorf("baseline: mode %s needs Postgres", opt.Mode)
	}
	opt.Schema = cmp.Or(opt.Schema, DefaultSchema(opt.Mode))
	opt.HoldTTL = cmp.Or(opt.HoldTTL, DefaultHoldTTL)
	opt.ShutdownTimeout = cmp.Or(opt.ShutdownTimeout, 10*time.Second)
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
	// /healthz takes a connection of the pool: a load run that calls it
	// from all its clients at once opens the pool before the rush.
	s.app.Get("/healthz", func(c *fiber.Ctx) error {
		return answer(c, http.StatusOK, fiber.Map{"status": "ok"}, pool.Ping(c.UserContext()))
	})
	s.app.Get("/metrics", adaptor.HTTPHandler(processMetrics()))
	switch opt.Mode {
	case Cart:
		s.cart = newCartQueries(opt.Schema, allLocks)
		s.app.Post(CartReservePath, s.reserveCart)
	case Holds:
		s.holds = newHoldQueries(opt.Schema, true)
		s.app.Post(HoldsPath, s.createHold)
		s.app.Post(HoldsPath+"/:holdId/confirm", s.confirmHold)
		s.app.Delete(HoldsPath+"/:holdId", s.cancelHold)
	default:
		s.group = newGroupQueries(opt.Schema)
		s.app.Post(EventsPath+"/:id/holds", s.holdGroup)
		s.app.Post(EventsPath+"/:id/holds/:holdId/confirm", s.confirmGroup)
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

// answer sends v with status, or the refusal err carries in holdfast's
// error envelope; other errors go to the error handler.
func answer(c *fiber.Ctx, status int, v any, err error) error {
	if p, ok := domain.AsProblem(err); ok {
		return c.Status(p.HTTPStatus).JSON(fiber.Map{"error": p})
	}
	if err != nil {
		return err
	}
	return c.Status(status).JSON(v)
}

// caller is the request's X-User-Id, required.
func caller(c *fiber.Ctx) (string, error) {
	user := strings.Clone(c.Get(UserHeader))
	if user == "" {
		return "", domain.Invalid("%s header is required", UserHeader)
	}
	return user, nil
}

// errorHandler answers fiber's own refusals with their status and any
// other error with a logged 500, in holdfast's envelope.
func (s *Server) errorHandler(c *fiber.Ctx, err error) error {
	var fe *fiber.Error
	if errors.As(err, &fe) && fe.Code < 500 {
		return answer(c, 0, nil, domain.Invalid("%s", fe.Message).WithStatus(fe.Code))
	}
	s.opt.Log.Error("baseline: request failed", "method", c.Method(), "path", c.Path(), "err", err)
	return answer(c, 0, nil, domain.NewProblem(domain.CodeInternal, "%s", err.Error()))
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

func ptr[T any](v T) *T { return &v }

// wrap names op in a failure of Postgres; nil stays nil.
func wrap(op string, err error) error {
	if err != nil {
		return fmt.Errorf("baseline: %s: %w", op, err)
	}
	return nil
}
