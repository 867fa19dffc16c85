package baseline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
)

// The lean mode is the strongest synchronous first-come-first-served design
// we know a team would build: one statement per request, which takes the
// first free seat that no other transaction holds (FOR UPDATE SKIP LOCKED on
// the partial index of free seats) and reserves it, with duplicates refused
// by the one-seat-per-user unique index; no Redis, no read before the
// write, Go's own net/http server. Nothing found means sold out: a seat
// another request holds is about to be reserved by it, unless that request
// is a second one of a user who already holds a seat (the unique index then
// rolls it back), so a user who sends twice at once can make another see
// sold out early; the bench sends one request a user. Its seats are made by
// Setup.

// ReservePath is the seed's endpoint.
const ReservePath = "/api/v1/seats/reservation/fcfs"

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

// leanMux serves the lean mode's routes: the seed's reservation endpoint,
// /healthz, and /metrics.
func (s *Server) leanMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+ReservePath, s.leanReserve)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.Handle("GET /metrics", processMetrics())
	return mux
}

func (s *Server) leanReserve(w http.ResponseWriter, r *http.Request) {
	user := r.Header.Get(UserHeader)
	if user == "" {
		leanError(w, http.StatusBadRequest, "validation_failed", UserHeader+" header is required")
		return
	}
	var body struct {
		Phone *string `json:"phone"`
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		leanError(w, http.StatusRequestEntityTooLarge, "validation_failed", "body over 64 KiB")
		return
	}
	if err == nil && len(raw) > 0 { // the seed allows an empty body (§4)
		err = json.Unmarshal(raw, &body)
	}
	if err != nil {
		leanError(w, http.StatusBadRequest, "validation_failed", `body must be {"phone": "..."}`)
		return
	}
	reply, err := s.leanTake(r.Context(), user, body.Phone)
	if err != nil {
		s.opt.Log.Error("baseline: request failed", "path", r.URL.Path, "err", err)
		leanError(w, http.StatusInternalServerError, "internal_error", "the reservation failed")
		return
	}
	writeJSON(w, http.StatusOK, reply)
}

// leanTake is the whole of a reservation: one statement, and a second only
// when the unique index says the user already holds a seat (to name it).
func (s *Server) leanTake(ctx context.Context, user string, phone *string) (Reply, error) {
	var id int64
	err := s.pool.QueryRow(ctx, s.sql.take, user, phone).Scan(&id)
	switch {
	case err == nil:
		return Reply{Success: true, SeatID: &id, ReservedBy: &user}, nil
	case errors.Is(err, pgx.ErrNoRows):
		return Reply{Reason: ptr(SoldOut)}, nil
	case isUniqueViolation(err):
		held, err := s.seatOf(ctx, user)
		if err != nil {
			return Reply{}, err
		}
		return alreadyReserved(held, user), nil
	}
	return Reply{}, fmt.Errorf("baseline: take seat: %w", err)
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

func leanError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]map[string]string{"error": {"code": code, "message": msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// serveLean answers on ln with net/http until ctx ends, then shuts down
// gracefully.
func (s *Server) serveLean(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s.leanMux(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.opt.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
