// Package api is holdfast's HTTP API (Fiber v2): authentication, the error
// envelope, durable intake of writes answered 202, request status polling,
// health, metrics and the Asynqmon UI. The composition root
// (cmd/wiring) builds it and mounts the verticals' routes on it,
// handing each only the parts it uses (Writes, Limits, V1, ...).
package api

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"regexp"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/google/uuid"
	"github.com/hibiken/asynqmon"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/auth"
	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/buildinfo"
	"github.com/holdfast/holdfast/metrics"
	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/storage"
)

// Mount adds routes to the server while New builds it, before its
// catch-all 404: the composition root's, which hands each vertical the few
// parts of the server it uses (V1, Writes, Limits, IssueTicket, Root).
type Mount func(s *Server)

// Writes is what a vertical's write routes use of the server: DeclareWrites
// once, as they are mounted, and Accept for each write. Declared here once
// rather than in each of the four verticals that take it; *Server is it.
type Writes interface {
	DeclareWrites(queue string, types ...string)
	Accept(c *fiber.Ctx, sub requests.Submission) error
}

// Deps are the connections and collaborators the server uses.
type Deps struct {
	Pool     *pgxpool.Pool
	Redis    redis.UniversalClient
	Intake   *requests.Intake
	Store    *requests.Store
	Notifier *Notifier
	Signer   *auth.Signer // holdfast's own tokens: tickets
	// Tokens verifies bearer tokens (an auth.Provider); nil: Signer does.
	Tokens   TokenVerifier
	Registry *prometheus.Registry
	Metrics  *metrics.Pipeline
	HTTP     *metrics.HTTP // per-route latency; nil records nothing
	Log      *slog.Logger
	// Monitoring is the Asynqmon handler; nil leaves /monitoring out.
	Monitoring *asynqmon.HTTPHandler
}

// Server is the HTTP API.
type Server struct {
	Deps
	cfg      config.Config
	app      *fiber.App
	v1       fiber.Router
	draining atomic.Bool // told to stop, serving out SHUTDOWN_DRAIN_DELAY
}

// New builds the server and its routes.
func New(cfg config.Config, d Deps, mounts ...Mount) *Server {
	cfg.DependencyTimeout = cmp.Or(cfg.DependencyTimeout, defaultDependencyTimeout)
	if d.Tokens == nil && d.Signer != nil {
		d.Tokens = d.Signer
	}
	s := &Server{Deps: d, cfg: cfg}
	s.app = fiber.New(fiber.Config{
		AppName:   "holdfast",
		BodyLimit: cfg.BodyLimit,
		// readBody enforces BodyLimit itself, on the streamed body (see
		// there); holdfast takes JSON only, so multipart is never parsed.
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		// Behind TRUSTED_PROXIES the client is the first valid address of
		// X-Forwarded-For, so per-IP limits count clients, not the
		// balancer; any other sender's header is ignored.
		EnableTrustedProxyCheck: len(cfg.TrustedProxies) > 0,
		TrustedProxies:          cfg.TrustedProxies,
		ProxyHeader:             proxyHeader(cfg.TrustedProxies),
		EnableIPValidation:      true,
		ErrorHandler:            s.errorHandler,
		DisableStartupMessage:   true,
		ReadTimeout:             60 * time.Second,
		WriteTimeout:            60 * time.Second,
		IdleTimeout:             120 * time.Second,
	})
	// The inner recover turns a handler's panic into an error that the
	// access log and the latency metric see as a 500; the outer one guards
	// the middleware itself.
	s.app.Use(recover.New(), s.trace, s.accessLog, recover.New(), s.readBody, s.bounded)
	build := buildinfo.Read()
	s.app.Get("/healthz", func(c *fiber.Ctx) error {
		return c.JSON(fiber.Map{"status": "ok", "version": build.Version, "revision": build.Revision})
	})
	s.app.Get("/readyz", s.ready)
	if cfg.MetricsAddr == "" { // else Run serves them on METRICS_ADDR
		s.app.Get("/metrics", adaptor.HTTPHandler(promhttp.HandlerFor(d.Registry, promhttp.HandlerOpts{})))
	}
	s.app.Get(OpenAPIPath, serveOpenAPI)
	if d.Monitoring != nil {
		s.app.Use("/monitoring", s.adminOnly, adaptor.HTTPHandler(d.Monitoring))
	}
	s.v1 = s.app.Group("/api/v1", func(c *fiber.Ctx) error {
		if isPublic(c.Path()) {
			return c.Next()
		}
		return s.authenticate(c)
	})
	s.v1.Get("/requests/:id", s.getRequest)
	for _, m := range mounts {
		m(s)
	}
	s.app.Use(func(c *fiber.Ctx) error { return fiber.ErrNotFound })
	return s
}

// DeclareWrites names the write types a mount accepts and the queue they
// go to, so that their counters (accepted by type, overloaded by queue) are
// exported at 0 before the first write.
func (s *Server) DeclareWrites(queue string, types ...string) {
	s.Metrics.InitIntake(queue, types...)
}

func isPublic(path string) bool {
	const p = "/api/v1/public"
	return len(path) >= len(p) && path[:len(p)] == p && (len(path) == len(p) || path[len(p)] == '/')
}

// Drain begins the shutdown of an API told to stop: /readyz answers 503
// and every answer closes its connection, so that load balancers and
// keep-alive clients go to other APIs, while this one serves on for
// SHUTDOWN_DRAIN_DELAY; then stop ends the API (Serve's context).
func (s *Server) Drain(stop func()) {
	s.draining.Store(true)
	time.AfterFunc(s.cfg.ShutdownDrainDelay, stop)
}

// Serve answers on ln until ctx ends, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- s.app.Listener(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := s.app.ShutdownWithContext(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return <-errc
}

var traceIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

const localTrace = "traceId"

// trace gives every request a trace id: the caller's X-Request-Id if it is
// sane, else a new one; it is echoed back and appears in logs and errors.
func (s *Server) trace(c *fiber.Ctx) error {
	id := c.Get(fiber.HeaderXRequestID)
	if !traceIDPattern.MatchString(id) {
		id = uuid.NewString()
	}
	c.Locals(localTrace, id)
	c.Set(fiber.HeaderXRequestID, id)
	if s.draining.Load() { // Server.Drain: every answer closes its connection
		c.Context().SetConnectionClose()
	}
	return c.Next()
}

// proxyHeader is the header that names the client when proxies are trusted.
func proxyHeader(trusted []string) string {
	if len(trusted) == 0 {
		return ""
	}
	return fiber.HeaderXForwardedFor
}

// defaultDependencyTimeout is DEPENDENCY_TIMEOUT's default, for a
// configuration built in code without it.
const defaultDependencyTimeout = 2 * time.Second

// drainLimit is how much of an oversized body the API reads and throws
// away before it answers 413 and closes the connection.
const drainLimit = 16 << 20

// readBody reads the request's body whole before any handler runs, up to
// BODY_LIMIT. fasthttp's own limit closed the connection while the client
// was still sending an oversized body, and a client that writes the whole
// body before it reads (Go's, at 5 MB every time) saw a reset, never the
// 413. Here an oversized body is read and discarded, up to drainLimit, so
// the client can read its 413; the connection is then closed. Reading
// every body whole also means bytes a handler did not read are never taken
// for the connection's next request.
func (s *Server) readBody(c *fiber.Ctx) error {
	stream := c.Context().RequestBodyStream()
	if stream == nil {
		return c.Next()
	}
	limit := s.cfg.BodyLimit
	req := c.Request()
	if n := req.Header.ContentLength(); n >= 0 && n <= limit {
		req.Body() // exactly n bytes, into the request's pooled buffer
		return c.Next()
	}
	// Too long for its Content-Length, or chunked with no length given.
	body, err := io.ReadAll(io.LimitReader(stream, int64(limit)+1))
	if err == nil && len(body) <= limit {
		req.SetBody(body)
		return c.Next()
	}
	c.Context().SetConnectionClose()
	if err != nil {
		return fiber.NewError(fiber.StatusBadRequest, "the request body could not be read")
	}
	_, _ = io.CopyN(io.Discard, stream, drainLimit)
	return fiber.ErrRequestEntityTooLarge
}

// bounded gives each request DEPENDENCY_TIMEOUT for its calls to Postgres
// and Redis, so an outage, a slow query or a full pool is a quick 503 and
// never a hang. A long poll's waiting and a stream's events run past it on
// contexts of their own.
func (s *Server) bounded(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), s.cfg.DependencyTimeout)
	defer cancel()
	c.SetUserContext(ctx)
	return c.Next()
}

func traceID(c *fiber.Ctx) string {
	id, _ := c.Locals(localTrace).(string)
	return id
}

const localRequestID = "requestId"

// accessLog writes one line per HTTP request with its trace id and, for
// writes, the accepted request's id, and records its latency under the route
// pattern that answered it.
func (s *Server) accessLog(c *fiber.Ctx) error {
	start := time.Now()
	err := c.Next()
	if err != nil {
		if herr := s.app.ErrorHandler(c, err); herr != nil {
			_ = c.SendStatus(fiber.StatusInternalServerError)
		}
	}
	status := c.Response().StatusCode()
	if s.HTTP != nil {
		s.HTTP.Observe(c.Method(), c.Route().Path, status, time.Since(start).Seconds())
	}
	if c.Path() == "/metrics" || c.Path() == "/healthz" || !s.Log.Enabled(c.UserContext(), slog.LevelInfo) {
		return nil
	}
	attrs := []any{"method", c.Method(), "path", c.Path(), "status", status,
		"ms", float64(time.Since(start).Microseconds()) / 1000, "traceId", traceID(c)}
	if rid, ok := c.Locals(localRequestID).(string); ok {
		attrs = append(attrs, "requestId", rid)
	}
	s.Log.Info("http", attrs...)
	return nil
}

// ready reports whether Postgres and Redis answer.
func (s *Server) ready(c *fiber.Ctx) error {
	if s.draining.Load() {
		return domain.NewProblem(domain.CodeUnavailable, "shutting down").
			WithMeta("retryAfterSeconds", unavailableRetryAfter)
	}
	ctx, cancel := context.WithTimeout(c.UserContext(), 2*time.Second)
	defer cancel()
	if err := storage.Ready(ctx, s.Pool, s.Redis); err != nil {
		return domain.NewProblem(domain.CodeUnavailable, "%s", err.Error()).
			WithMeta("retryAfterSeconds", unavailableRetryAfter)
	}
	if s.Tokens != nil && s.Tokens.Ready() != nil { // the identity provider's keys, not fetched yet
		return errKeysUnavailable
	}
	return c.JSON(fiber.Map{"status": "ready"})
}
