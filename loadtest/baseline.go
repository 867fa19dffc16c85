package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/bench/baseline"
	"github.com/holdfast/holdfast/client"
)

// The baseline-* scenarios drive cmd/baseline, the synchronous design of a
// vertical, with the same clients, at the same concurrency, as the
// holdfast scenario beside it. Each writes its fixture into the design's
// tables and checks them there (inBaselineDB): the design serves only the
// writes a rush measures.

// inBaselineDB runs f on the synchronous design's Postgres
// (Options.DatabaseURL, whose search_path selects the mode's schema),
// telling it the schema.
func inBaselineDB(ctx context.Context, e *Env, f func(db *pgxpool.Pool, schema string) error) error {
	if e.Opt.DatabaseURL == "" {
		return errors.New("the synchronous design's fixture and checks are in its Postgres: set -database-url, its search_path the mode's schema")
	}
	db, err := pgxpool.New(ctx, e.Opt.DatabaseURL)
	if err != nil {
		return err
	}
	defer db.Close()
	var schema string
	if err := db.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return err
	}
	return f(db, schema)
}

// warmUp calls the design's /healthz, which takes a connection of its
// pool, from every client at once: its pool and the clients' connections
// are open before the rush, as the fixture's calls leave holdfast's API.
func warmUp(ctx context.Context, e *Env) error {
	return forEach(e.Opt.Concurrency, e.Opt.Concurrency, func(int) error {
		return e.base.Do(ctx, http.MethodGet, "/healthz", nil, nil)
	})
}

// writer makes a rush's writes of one design, at holdfast's paths (which
// the synchronous designs answer too), and returns their outcomes.
type writer interface {
	write(ctx context.Context, kind, method, path string, body any) (client.Outcome, error)
}

// queued writes through holdfast as c: a 202, then the outcome.
type queued struct {
	e *Env
	c *client.Client
}

func (w queued) write(ctx context.Context, kind, method, path string, body any) (client.Outcome, error) {
	return w.e.Write(ctx, w.c, kind, func(ctx context.Context) (client.Accepted, error) { return w.c.Submit(ctx, method, path, body) })
}

// syncWriter writes to the synchronous design as user (X-User-Id): an
// answer is its own outcome, accepted and terminal at once, recorded as
// kind.sync.
type syncWriter struct {
	e    *Env
	user string
}

// write sends one write and records it: a 2xx succeeded with its body as
// the result, a 4xx was rejected with its error; anything else is an error.
func (w syncWriter) write(ctx context.Context, kind, method, path string, body any) (client.Outcome, error) {
	kind += ".sync"
	start := time.Now()
	var raw json.RawMessage
	err := w.e.base.Do(ctx, method, path, body, &raw, client.Header(baseline.UserHeader, w.user))
	took := time.Since(start)
	var out client.Outcome
	var ce *client.Error
	switch {
	case err == nil:
		out = client.Outcome{Status: client.StatusSucceeded, Result: raw}
	case errors.As(err, &ce) && ce.HTTPStatus >= 400 && ce.HTTPStatus < 500:
		out = client.Outcome{Status: client.StatusRejected, Problem: ce}
	default:
		w.e.Rec.SubmitError(kind, err)
		return out, err
	}
	w.e.Rec.Accepted(kind, start, took)
	w.e.Rec.Terminal(kind, start, out)
	return out, nil
}

// baseline-fcfs drives the lean mode, seed 004's synchronous FCFS, with its
// own plain posts: its answers are the seed's, always 200.

// plainPost sends a JSON POST as user and returns the status and body.
func plainPost(ctx context.Context, e *Env, path, user string, body any) (int, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(e.Opt.BaseURL, "/")+path, bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(baseline.UserHeader, user)
	resp, err := e.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	return resp.StatusCode, rb, err
}

// baselineFCFS: Users users each ask the synchronous server once for a seat
// (POST /api/v1/seats/reservation/fcfs, answered 200 with the seed's body).
type baselineFCFS struct {
	seats, users int
	book         *seatBook
}

func (s *baselineFCFS) Setup(_ context.Context, e *Env) (int, error) {
	s.seats, s.users = orDefault(e.Opt.Seats, 1000), orDefault(e.Opt.Users, 2000)
	s.book = newSeatBook()
	return s.users, nil
}

func (s *baselineFCFS) Journey(ctx context.Context, e *Env, i int) error {
	user := fmt.Sprintf("%s-%d", e.RunID, i)
	start := time.Now()
	status, body, err := plainPost(ctx, e, "/api/v1/seats/reservation/fcfs", user, map[string]string{"phone": fmt.Sprintf("+8210%08d", i)})
	took := time.Since(start)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("HTTP %d: %s", status, body)
	}
	var r struct {
		Success bool    `json:"success"`
		SeatID  *int64  `json:"seat_id"`
		Reason  *string `json:"reason"`
	}
	if err == nil {
		err = json.Unmarshal(body, &r)
	}
	if err != nil {
		e.Rec.SubmitError("fcfs.sync", err)
		return err
	}
	// A synchronous answer is its own outcome: accepted and terminal at once.
	e.Rec.Accepted("fcfs.sync", start, took)
	out := client.Outcome{Status: client.StatusSucceeded}
	switch {
	case r.Success && r.SeatID != nil:
		s.book.won(user, *r.SeatID)
	case r.Reason != nil && *r.Reason == "sold_out":
		s.book.sold()
		out = client.Outcome{Status: client.StatusRejected, Problem: &client.Error{Code: "SOLD_OUT"}}
	case r.Reason != nil:
		out = client.Outcome{Status: client.StatusRejected, Problem: &client.Error{Code: strings.ToUpper(*r.Reason)}}
	}
	e.Rec.Terminal("fcfs.sync", start, out)
	return nil
}

// Check verifies what the clients were told: no seat twice, no user twice,
// no more seats than exist. The server's own tables are not read; false
// sold-outs (SOLD_OUT while seats were left) show in the outcome counts.
func (s *baselineFCFS) Check(context.Context, *Env) ([]string, error) {
	out := s.book.bad.all()
	if won := len(s.book.bySeat); won > s.seats {
		out = append(out, fmt.Sprintf("oversold: %d seats given for %d", won, s.seats))
	}
	return out, nil
}
