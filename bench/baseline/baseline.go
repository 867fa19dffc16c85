// Package baseline is the comparison point for `make bench`: the first-come-
// first-served seat grab of seed 004 built the way a team would build it
// without holdfast, synchronously inside each HTTP request. Redis INCR, a
// lookup of the caller's seat, then up to MaxAttempts conditional UPDATEs on
// Postgres (after each that finds nothing, a cheap check whether any seat is
// still free decides between sold_out and another try), and the answer in
// the seed's §5 shape. The caller is named by the X-User-Id header, which is
// what reserved_by records; the seed's gateway de-duplication is left out.
// It is deliberately the seed's design, flaws included; it is not part of
// holdfast. The cart mode is seed 002's order reserve built the same way,
// one transaction per HTTP request, in its strongest plain form (cart.go),
// the hold mode seed 000's locked hold flow the same way (hold.go), and the
// group modes best-available seat holds for groups (group.go).
// Three more modes measure parts of what holdfast does: a handler that only
// enqueues an Asynq task, one that first makes the request durable with
// holdfast's own intake, and that plus the rest of a write's round trip
// built the plain way (its task processed as it comes, a long poll).
package baseline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/requests"
)

// Mode selects what the server does.
type Mode string

const (
	// Literal allocates with the seed's UPDATE made valid Postgres as
	// literally as possible: concurrent requests pick the same first free
	// seat, all but one update nothing, and they retry.
	Literal Mode = "literal"
	// SkipLocked is Literal with FOR UPDATE SKIP LOCKED in the subquery, so
	// concurrent requests pick different seats.
	SkipLocked Mode = "skiplocked"
	// Lean is the strongest synchronous design: SkipLocked's UPDATE as the
	// whole request, with no Redis counter, no lookup before it and no
	// retry, on Go's net/http server (see lean.go).
	Lean Mode = "lean"
	// Enqueue serves only POST /enqueue, which enqueues one no-op Asynq task
	// and answers 202: an HTTP handler that does nothing but enqueue.
	Enqueue Mode = "enqueue"
	// Durable serves POST /enqueue too, but makes each request durable
	// first, as SPEC §2 requires of every 202: holdfast's own intake stores
	// it in the requests table (group-committed INSERT), then one Asynq task
	// is enqueued with the request's id. No authentication, rate limit,
	// mailbox or worker: the least a durable intake in front of Asynq does.
	Durable Mode = "durable"
	// RoundTrip is Durable plus the rest of the round trip SPEC §2 gives a
	// write, built the plain way with nothing of holdfast's in it: GET
	// /api/v1/requests/{id}?wait=D long-polls until the request's task has
	// run, which a RoundTripTasks process announces (see roundtrip.go).
	RoundTrip Mode = "roundtrip"
	// RoundTripTasks is RoundTrip's worker: an Asynq server that takes each
	// request's task as it comes and announces it done. It serves only
	// /healthz and /metrics over HTTP, and needs no Postgres.
	RoundTripTasks Mode = "roundtrip-tasks"
	// Cart is seed 002's order reserve done synchronously, one transaction
	// per HTTP request that locks the cart's options (see cart.go), in a
	// schema of its own (SetupCart).
	Cart Mode = "cart"
	// Holds is seed 000's hold flow done synchronously, one transaction per
	// HTTP request that locks the room type's stock rows for the stay's
	// nights (see hold.go), in a schema of its own (SetupHold).
	Holds Mode = "hold"
	// Group is best-available seat holds for groups done synchronously, one
	// transaction per HTTP request that locks a row of the seat map,
	// waiting its turn (see group.go), in a schema of its own (SetupGroup).
	Group Mode = "group"
	// GroupSkipLocked is Group with the candidate rows locked FOR UPDATE
	// SKIP LOCKED: a hold takes the best row no one else is deciding on.
	GroupSkipLocked Mode = "group-skiplocked"
)

// ParseMode reads a mode name.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Literal, SkipLocked, Lean, Enqueue, Durable, RoundTrip, RoundTripTasks, Cart, Holds, Group, GroupSkipLocked:
		return m, nil
	}
	return "", fmt.Errorf("baseline: unknown mode %q (want literal, skiplocked, lean, enqueue, durable, roundtrip, roundtrip-tasks, cart, hold, group or group-skiplocked)", s)
}

// UsesPostgres reports whether the mode needs a Postgres pool: all but
// enqueue and roundtrip-tasks.
func (m Mode) UsesPostgres() bool { return m != Enqueue && m != RoundTripTasks }

// StoresRequests reports whether the mode stores each request in holdfast's
// requests table, so its pool must be migrated to holdfast's schema
// (storage.Migrate); the seat, cart and hold modes use a schema of their
// own (Setup, SetupCart, SetupHold).
func (m Mode) StoresRequests() bool { return m == Durable || m == RoundTrip }

const (
	// ReservePath is the seed's endpoint.
	ReservePath = "/api/v1/seats/reservation/fcfs"
	// EnqueuePath is the endpoint of the enqueue, durable and roundtrip
	// modes.
	EnqueuePath = "/enqueue"
	// StatusPath is the roundtrip mode's long poll, shaped like holdfast's
	// (GET /api/v1/requests/{id}?wait=10s) so that the same client reads it.
	StatusPath = "/api/v1/requests/"
	// UserHeader names the caller; it is what reserved_by records.
	UserHeader = "X-User-Id"
	// SequenceKey is the seed's Redis counter of attempts (§9), for
	// monitoring only.
	SequenceKey = "fcfs:seat:sequence"
	// ContentionKey counts the UPDATEs that found nothing while seats were
	// left, each followed by a retry (the seed's optional contention metric).
	ContentionKey = "fcfs:seat:contention"
	// MaxAttempts bounds the conditional UPDATEs per request (seed §5.4).
	MaxAttempts = 5
	// DefaultQueue is the Asynq queue of the enqueue, durable and roundtrip
	// modes.
	DefaultQueue = "baseline-enqueue"
	// TaskType is the type of the no-op tasks of the enqueue, durable and
	// roundtrip modes, and of their requests.
	TaskType = "baseline:noop"
)

// Reason says why a reservation did not succeed (seed §6).
type Reason string

// The seed's reason codes.
const (
	SoldOut         Reason = "sold_out"
	AlreadyReserved Reason = "already_reserved"
	Contention      Reason = "contention"
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
	Schema          string        // Postgres schema of the seats (default DefaultSchema), or the cart, hold or group modes' tables (DefaultCartSchema, DefaultHoldSchema, DefaultGroupSchema)
	HoldTTL         time.Duration // the hold mode's hold lifetime; default DefaultHoldTTL
	Queue           string        // queue of the enqueue, durable and roundtrip modes; default DefaultQueue
	Concurrency     int           // the roundtrip-tasks mode's Asynq handlers; default 64, as the Asynq floor's
	ShutdownTimeout time.Duration // default 10s
	Log             *slog.Logger  // 5xx answers are logged here; nil discards
}

// Server is the baseline's HTTP server.
type Server struct {
	opt    Options
	pool   *pgxpool.Pool
	rdb    redis.UniversalClient
	client *asynq.Client
	intake *requests.Intake // durable and roundtrip modes
	tasks  *asynq.Server    // roundtrip-tasks mode
	done   *doneMarks       // roundtrip mode
	// stopping ends when Serve begins to shut down, so that long polls
	// answer instead of holding the shutdown up.
	stopping context.Context
	stop     context.CancelFunc
	app      *fiber.App
	sql      queries
	cart     cartQueries  // cart mode
	holds    holdQueries  // hold mode
	group    groupQueries // group modes
	// beforeInsert, when set, runs in a reserve whose cart fits, or a hold
	// that fits, before its INSERT: the tests' barrier.
	beforeInsert func(user string)
}

// queries are the statements, with the schema spelled out so that they do
// not depend on the connection's search_path.
type queries struct {
	seatOf  string // the seat a user holds
	take    string // the conditional UPDATE of the mode
	soldOut string // whether no seat is free
}

func newQueries(schema string, mode Mode) queries {
	seats := pgx.Identifier{schema, "seats"}.Sanitize()
	lock := ""
	if mode == SkipLocked || mode == Lean {
		lock = " FOR UPDATE SKIP LOCKED"
	}
	return queries{
		seatOf: `SELECT id FROM ` + seats + ` WHERE reserved_by = $1 AND status`,
		take: `UPDATE ` + seats + ` SET status = true, reserved_by = $1, phone = $2, updated_at = now()
			WHERE id = (SELECT id FROM ` + seats + ` WHERE status = false ORDER BY id LIMIT 1` + lock + `)
			AND status = false RETURNING id`,
		soldOut: `SELECT NOT EXISTS (SELECT 1 FROM ` + seats + ` WHERE status = false)`,
	}
}

// New builds the server. The seat modes need pool and rdb; the enqueue and
// roundtrip-tasks modes need only rdb, and pool may be nil. The durable and
// roundtrip modes need pool migrated to holdfast's schema (storage.Migrate).
func New(pool *pgxpool.Pool, rdb redis.UniversalClient, opt Options) (*Server, error) {
	if _, err := ParseMode(string(opt.Mode)); err != nil {
		return nil, err
	}
	if rdb == nil || (pool == nil && opt.Mode.UsesPostgres()) {
		return nil, fmt.Errorf("baseline: mode %s needs Postgres and Redis", opt.Mode)
	}
	if opt.Schema == "" {
		opt.Schema = DefaultSchema
		switch opt.Mode {
		case Cart:
			opt.Schema = DefaultCartSchema
		case Holds:
			opt.Schema = DefaultHoldSchema
		case Group, GroupSkipLocked:
			opt.Schema = DefaultGroupSchema
		}
	}
	if opt.HoldTTL <= 0 {
		opt.HoldTTL = DefaultHoldTTL
	}
	if opt.Queue == "" {
		opt.Queue = DefaultQueue
	}
	if opt.ShutdownTimeout <= 0 {
		opt.ShutdownTimeout = 10 * time.Second
	}
	if opt.Concurrency <= 0 {
		opt.Concurrency = 64
	}
	if opt.Log == nil {
		opt.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{opt: opt, pool: pool, rdb: rdb, sql: newQueries(opt.Schema, opt.Mode)}
	s.stopping, s.stop = context.WithCancel(context.Background())
	s.app = fiber.New(fiber.Config{
		AppName:               "holdfast-baseline",
		DisableStartupMessage: true,
		ErrorHandler:          s.errorHandler,
	})
	s.app.Use(recover.New())
	s.app.Get("/healthz", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ok"}) })
	// The process collector only: make bench reads the server's CPU and
	// memory from it, as it does for holdfast's API.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.app.Get("/metrics", adaptor.HTTPHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	switch opt.Mode {
	case Enqueue:
		s.client = asynq.NewClientFromRedisClient(rdb)
		s.app.Post(EnqueuePath, s.enqueue)
	case Durable, RoundTrip:
		s.client = asynq.NewClientFromRedisClient(rdb)
		s.intake = requests.NewIntake(requests.NewStore(pool), enqueueOnly{s.client}, opt.Log)
		s.app.Post(EnqueuePath, s.acceptDurably)
		if opt.Mode == RoundTrip {
			s.done = &doneMarks{m: map[string]*doneMark{}}
			s.app.Get(StatusPath+":id", s.awaitDone)
		}
	case RoundTripTasks:
		s.tasks = s.newTaskServer()
	case Cart:
		s.cart = newCartQueries(opt.Schema, allLocks)
		s.mountCart()
	case Holds:
		s.holds = newHoldQueries(opt.Schema, true)
		s.mountHold()
	case Group, GroupSkipLocked:
		s.group = newGroupQueries(opt.Schema, opt.Mode == GroupSkipLocked)
		s.mountGroup()
	default:
		s.app.Post(ReservePath, s.reserve)
	}
	return s, nil
}

// Serve answers on ln until ctx ends, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	defer s.stop()
	if s.opt.Mode == Lean {
		return s.serveLean(ctx, ln)
	}
	switch {
	case s.done != nil:
		unfollow, err := s.followDone(ctx)
		if err != nil {
			return err
		}
		defer unfollow()
	case s.tasks != nil:
		if err := s.startTasks(); err != nil {
			return err
		}
		defer s.tasks.Shutdown()
	}
	errc := make(chan error, 1)
	go func() { errc <- s.app.Listener(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.stop()
	sctx, cancel := context.WithTimeout(context.Background(), s.opt.ShutdownTimeout)
	defer cancel()
	if err := s.app.ShutdownWithContext(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return <-errc
}

// Close removes the queue of the enqueue, durable and roundtrip modes:
// their tasks exist only to be counted, or were processed already. The
// requests stay in Postgres. It does nothing in the other modes.
func (s *Server) Close() error {
	if s.client == nil {
		return nil
	}
	err := asynq.NewInspectorFromRedisClient(s.rdb).DeleteQueue(s.opt.Queue, true)
	if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
		return fmt.Errorf("baseline: delete queue %s: %w", s.opt.Queue, err)
	}
	return nil
}

func (s *Server) enqueue(c *fiber.Ctx) error {
	info, err := s.client.EnqueueContext(c.UserContext(), asynq.NewTask(TaskType, nil, asynq.Queue(s.opt.Queue)))
	if err != nil {
		return fmt.Errorf("baseline: enqueue: %w", err)
	}
	return c.Status(fiber.StatusAccepted).JSON(fiber.Map{"taskId": info.ID})
}

// acceptDurably stores the body as a request, enqueues its task and answers
// 202 with the request's id, as holdfast's intake does for a write.
func (s *Server) acceptDurably(c *fiber.Ctx) error {
	body := c.Body()
	if len(body) == 0 {
		body = []byte("{}")
	}
	if !json.Valid(body) {
		return fiber.NewError(fiber.StatusBadRequest, "body must be JSON")
	}
	r, _, err := s.intake.Accept(c.UserContext(), requests.Submission{
		Type: TaskType, Queue: s.opt.Queue, UserID: "floor", Keys: []string{"floor"},
		Payload: bytes.Clone(body), // fasthttp reuses the body's buffer
	})
	if err != nil {
		return fmt.Errorf("baseline: accept: %w", err)
	}
	return c.Status(fiber.StatusAccepted).JSON(fiber.Map{"requestId": r.ID, "status": "queued", "statusUrl": StatusPath + r.ID.String()})
}

// enqueueOnly dispatches a durable request as one Asynq task with the
// request's id: it admits everything and has no mailboxes to post to.
type enqueueOnly struct{ client *asynq.Client }

func (enqueueOnly) Admit(context.Context, string, []string) error { return nil }

func (enqueueOnly) Post(_ context.Context, rs []*requests.Request) ([]requests.Posting, error) {
	return make([]requests.Posting, len(rs)), nil
}

func (d enqueueOnly) Enqueue(ctx context.Context, r *requests.Request, _ requests.Posting) error {
	_, err := d.client.EnqueueContext(ctx, asynq.NewTask(TaskType, nil, asynq.Queue(r.Queue), asynq.TaskID(r.ID.String())))
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return fmt.Errorf("baseline: enqueue: %w", err)
	}
	return nil
}

func (s *Server) reserve(c *fiber.Ctx) error {
	user := strings.Clone(c.Get(UserHeader))
	if user == "" {
		return fiber.NewError(fiber.StatusBadRequest, UserHeader+" header is required")
	}
	var body struct {
		Phone *string `json:"phone"`
	}
	if len(c.Body()) > 0 { // the seed allows an empty body (§4)
		if err := json.Unmarshal(c.Body(), &body); err != nil {
			return fiber.NewError(fiber.StatusBadRequest, `body must be {"phone": "..."}`)
		}
	}
	reply, err := s.reserveSeat(c.UserContext(), user, body.Phone)
	if err != nil {
		return err
	}
	return c.JSON(reply)
}

// reserveSeat is the seed's flow (§7) for one request: count it in Redis,
// answer already_reserved if the user holds a seat, else try the conditional
// UPDATE up to MaxAttempts times, stopping at sold_out and counting each
// retry in Redis.
func (s *Server) reserveSeat(ctx context.Context, user string, phone *string) (Reply, error) {
	if err := s.rdb.Incr(ctx, SequenceKey).Err(); err != nil {
		return Reply{}, fmt.Errorf("baseline: count attempt: %w", err)
	}
	held, err := s.seatOf(ctx, user)
	if err != nil {
		return Reply{}, err
	}
	if held != nil {
		return alreadyReserved(held, user), nil
	}
	for range MaxAttempts {
		var id int64
		err := s.pool.QueryRow(ctx, s.sql.take, user, phone).Scan(&id)
		switch {
		case err == nil:
			return Reply{Success: true, SeatID: &id, ReservedBy: &user}, nil
		case isUniqueViolation(err): // the same user won a seat in a concurrent request
			if held, err = s.seatOf(ctx, user); err != nil {
				return Reply{}, err
			}
			return alreadyReserved(held, user), nil
		case !errors.Is(err, pgx.ErrNoRows):
			return Reply{}, fmt.Errorf("baseline: take seat: %w", err)
		}
		var soldOut bool
		if err := s.pool.QueryRow(ctx, s.sql.soldOut).Scan(&soldOut); err != nil {
			return Reply{}, fmt.Errorf("baseline: check sold out: %w", err)
		}
		if soldOut {
			return Reply{Reason: ptr(SoldOut)}, nil
		}
		if err := s.rdb.Incr(ctx, ContentionKey).Err(); err != nil {
			return Reply{}, fmt.Errorf("baseline: count contention: %w", err)
		}
	}
	return Reply{ReservedBy: &user, Reason: ptr(Contention)}, nil
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
