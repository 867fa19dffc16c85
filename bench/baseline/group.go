package baseline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/client"
	"github.com/holdfast/holdfast/domain"
)

// The group mode is best-available seat holds for groups built the way a
// box office would build them without a queue: one Postgres transaction per
// HTTP request, answered with its outcome. A seat map's rows are the unit
// of locking: a row of seat_rows stands for its seats, so a hold locks one
// row instead of its fifty seats. A hold of quantity q:
//
//   - one statement reads the caller's live seats (maxSeatsPerUser) and the
//     first few rows, best first, that have a run of q free seats now (a
//     seat is free when it is not sold and its hold, if any, is past its
//     expires_at: expiry is exact, judged by time, no sweeper), skipping
//     rows known to be sold out;
//   - it locks the first of them FOR UPDATE SKIP LOCKED, taking the first
//     row no one else is deciding on, reads the row's seats again under the
//     lock, finds the first run of q free seats, and inserts the hold and
//     marks its seats in one statement whose WHERE re-checks that each is
//     still free; COMMIT. A candidate that no longer has a run is passed
//     over, the next locked; when none had one (or all
//     were taken), the transaction starts again with fresh candidates, a
//     few times, waiting for their locks from then on;
//   - with no candidate at all, SOLD_OUT when fewer than q seats are free,
//     else SEATS_NOT_TOGETHER, as holdfast answers.
//
// A confirm locks the hold's row, checks the hold is still live by the
// clock, marks it CONFIRMED and its seats sold, and marks the row sold out
// when none of its seats is left unsold; COMMIT. Answers and codes are
// holdfast's (its SeatHold result, client.SeatHold). The tables keep holdfast's names
// (events, seats, seat_holds) so that the load tool's check reads both
// designs with the same queries, in a schema of their own (Setup); the
// event is made by NewEvent.

const (
	// EventsPath+"/{id}/holds" holds seats (POST {quantity}),
	// EventsPath+"/{id}/holds/{holdId}/confirm" confirms a hold (POST
	// {paymentReference}): holdfast's paths.
	EventsPath = "/api/v1/events"
	// groupAttempts bounds the transactions a hold starts over when every
	// candidate row it locked had lost its run meanwhile.
	groupAttempts = 5
	// groupCandidates is how many rows with a run a hold reads at once.
	groupCandidates = 8
)

// groupQueries are the group mode's statements, schema spelled out.
type groupQueries struct {
	state    string // settings, the caller's live seats, candidate rows
	lock     string // a candidate row locked, as the mode locks it
	lockWait string // a row locked, waiting for it
	rowSeats string // a row's unsold seats, each free or not
	put      string // the hold and its seats, each re-checked free
	free     string // free seats of the event
	readHold string // a hold and its row
	confirm  string // a live hold confirmed
	sell     string // its seats sold, and its row sold out if it is
}

// newGroupQueries builds the statements.
func newGroupQueries(schema string) groupQueries {
	q := func(table string) string { return pgx.Identifier{schema, table}.Sanitize() }
	events, rows, seats, holds := q("events"), q("seat_rows"), q("seats"), q("seat_holds")
	free := `NOT s.sold AND (s.held_until IS NULL OR s.held_until <= clock_timestamp())`
	return groupQueries{
		state: `SELECT e.seat_hold_seconds, e.max_seats_per_user,
				(SELECT coalesce(sum(cardinality(h.seat_ids)), 0) FROM ` + holds + ` h WHERE h.event_id = e.id AND h.user_id = $2
					AND (h.status = 'CONFIRMED' OR h.status = 'HELD' AND h.expires_at > clock_timestamp())),
				ARRAY(SELECT r.id FROM ` + rows + ` r WHERE r.event_id = e.id AND NOT r.sold_out AND EXISTS (
					SELECT 1 FROM (SELECT s.pos - row_number() OVER (ORDER BY s.pos) AS run FROM ` + seats + ` s
						WHERE s.row_id = r.id AND ` + free + `) f GROUP BY run HAVING count(*) >= $3)
					ORDER BY r.preference LIMIT ` + strconv.Itoa(groupCandidates) + `)
			FROM ` + events + ` e WHERE e.id = $1`,
		lock:     `SELECT id FROM ` + rows + ` WHERE id = $1 FOR UPDATE SKIP LOCKED`,
		lockWait: `SELECT id FROM ` + rows + ` WHERE id = $1 FOR UPDATE`,
		rowSeats: `SELECT s.id, s.pos, ` + free + ` FROM ` + seats + ` s WHERE s.row_id = $1 AND NOT s.sold ORDER BY s.pos`,
		put: `WITH t AS (SELECT clock_timestamp() AS now),
			h AS (
				INSERT INTO ` + holds + ` (event_id, user_id, seat_ids, status, expires_at, created_at, updated_at)
				SELECT $1, $2, $3, 'HELD', t.now + make_interval(secs => $4), t.now, t.now FROM t
				RETURNING id, expires_at),
			s AS (
				UPDATE ` + seats + ` s SET hold_id = h.id, held_until = h.expires_at FROM h
				WHERE s.id = ANY($3) AND ` + free + ` RETURNING s.id)
			SELECT h.id, h.expires_at, (SELECT count(*) FROM s) FROM h`,
		free:     `SELECT count(*) FROM ` + seats + ` s WHERE s.event_id = $1 AND ` + free,
		readHold: `SELECT h.user_id, s.row_id FROM ` + holds + ` h JOIN ` + seats + ` s ON s.id = h.seat_ids[1] WHERE h.id = $1 AND h.event_id = $2`,
		confirm: `UPDATE ` + holds + ` SET status = CASE WHEN status = 'HELD' AND expires_at > clock_timestamp() THEN 'CONFIRMED' ELSE status END,
				payment_reference = CASE WHEN status = 'HELD' AND expires_at > clock_timestamp() THEN $2 ELSE payment_reference END,
				updated_at = CASE WHEN status = 'HELD' AND expires_at > clock_timestamp() THEN clock_timestamp() ELSE updated_at END
			WHERE id = $1 RETURNING seat_ids, status, expires_at, payment_reference, status = 'CONFIRMED' AND payment_reference = $2`,
		sell: `WITH s AS (UPDATE ` + seats + ` SET sold = true WHERE id = ANY($1) AND hold_id = $2 RETURNING id)
			UPDATE ` + rows + ` r SET sold_out = NOT EXISTS (SELECT 1 FROM ` + seats + ` x WHERE x.row_id = r.id AND NOT x.sold
				AND x.id <> ALL(ARRAY(SELECT id FROM s)))
			WHERE r.id = $3 RETURNING (SELECT count(*) FROM s)`,
	}
}

func (s *Server) holdGroup(c *fiber.Ctx) error {
	user, err := caller(c)
	if err != nil {
		return answer(c, 0, nil, err)
	}
	ev, err := strconv.ParseInt(c.Params("id"), 10, 64)
	var in struct {
		Quantity int `json:"quantity"`
	}
	if err != nil || json.Unmarshal(c.Body(), &in) != nil || in.Quantity < 1 {
		return answer(c, 0, nil, domain.Invalid(`body must be {"quantity": n}, under a numeric event id`))
	}
	h, err := s.holdSeats(c.UserContext(), ev, user, in.Quantity)
	return answer(c, http.StatusCreated, h, err)
}

// holdSeats runs the hold's transaction, again with fresh candidates when
// every candidate it locked had lost its run meanwhile, or, with SKIP
// LOCKED, was being decided on by others: then it waits for them, in a
// transaction that holds no other row (one holding a row while it waits
// for another could deadlock with one doing the same the other way round).
func (s *Server) holdSeats(ctx context.Context, ev int64, user string, n int) (client.SeatHold, error) {
	lock := s.group.lock
	for range groupAttempts {
		h, retry, err := s.tryGroupHold(ctx, ev, user, n, lock)
		if !retry {
			return h, err
		}
		lock = s.group.lockWait
	}
	return client.SeatHold{}, domain.NewProblem(domain.CodeSeatsNotTogether, "no %d seats side by side could be held; try again", n)
}

// tryGroupHold is one hold transaction; retry reports candidates that had
// lost their runs, nothing done.
func (s *Server) tryGroupHold(ctx context.Context, ev int64, user string, n int, lock string) (h client.SeatHold, retry bool, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return client.SeatHold{}, false, fmt.Errorf("baseline: begin hold: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	var holdSecs, perUser, have int
	var candidates []int64
	err = tx.QueryRow(ctx, s.group.state, ev, user, n).Scan(&holdSecs, &perUser, &have, &candidates)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return client.SeatHold{}, false, domain.NewProblem(domain.CodeNotFound, "no such event")
	case err != nil:
		return client.SeatHold{}, false, fmt.Errorf("baseline: read candidates: %w", err)
	case have+n > perUser:
		return client.SeatHold{}, false, domain.NewProblem(domain.CodeSeatLimit, "at most %d seats per person for this event; you hold %d", perUser, have)
	case len(candidates) == 0:
		return client.SeatHold{}, false, s.noRun(ctx, tx, ev, n)
	}
	seats, err := s.lockRun(ctx, tx, candidates, n, lock)
	if err != nil || seats == nil {
		return client.SeatHold{}, err == nil, err
	}
	h = client.SeatHold{EventID: ev, UserID: user, Status: "held", SeatIDs: seats}
	var marked int
	if err := tx.QueryRow(ctx, s.group.put, ev, user, seats, holdSecs).Scan(&h.HoldID, &h.ExpiresAt, &marked); err != nil {
		return client.SeatHold{}, false, fmt.Errorf("baseline: put hold: %w", err)
	}
	if marked != n {
		return client.SeatHold{}, false, fmt.Errorf("baseline: hold %d marked %d of its %d seats under its row's lock", h.HoldID, marked, n)
	}
	if err := tx.Commit(ctx); err != nil {
		return client.SeatHold{}, false, fmt.Errorf("baseline: commit hold: %w", err)
	}
	h.ExpiresAt = h.ExpiresAt.UTC()
	return h, false, nil
}

// lockRun locks the candidate rows in turn with lock, best first, and
// returns the first run of n free seats of the first that has one (nil:
// none had). With SKIP LOCKED, rows others are deciding on are passed
// over. Rows are locked in the map's order, so two holds waiting for each
// other's rows cannot both wait.
func (s *Server) lockRun(ctx context.Context, tx pgx.Tx, candidates []int64, n int, lock string) ([]int64, error) {
	for _, row := range candidates {
		var id int64
		err := tx.QueryRow(ctx, lock, row).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("baseline: lock row: %w", err)
		}
		if seats, err := s.runOf(ctx, tx, row, n); seats != nil || err != nil {
			return seats, err
		}
	}
	return nil, nil
}

// runOf reads row's unsold seats under its lock and returns the first run
// of n free ones side by side (nil: none); a sold seat, not read, breaks a
// run as a held one does.
func (s *Server) runOf(ctx context.Context, tx pgx.Tx, row int64, n int) ([]int64, error) {
	rows, err := tx.Query(ctx, s.group.rowSeats, row)
	if err != nil {
		return nil, fmt.Errorf("baseline: read row: %w", err)
	}
	var run []int64
	var id int64
	var pos, last int32
	var free bool
	found := false
	_, err = pgx.ForEachRow(rows, []any{&id, &pos, &free}, func() error {
		switch {
		case found:
		case !free:
			run = run[:0]
		default:
			if len(run) > 0 && pos != last+1 {
				run = run[:0]
			}
			run, last = append(run, id), pos
			found = len(run) == n
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("baseline: read row: %w", err)
	}
	if !found {
		return nil, nil
	}
	return run, nil
}

// noRun is the refusal when no row has a run of n: SOLD_OUT when fewer
// than n seats are free, else SEATS_NOT_TOGETHER.
func (s *Server) noRun(ctx context.Context, tx pgx.Tx, ev int64, n int) error {
	var free int
	if err := tx.QueryRow(ctx, s.group.free, ev).Scan(&free); err != nil {
		return fmt.Errorf("baseline: count free seats: %w", err)
	}
	if free < n {
		return domain.NewProblem(domain.CodeSoldOut, "fewer than %d seats are left", n).WithMeta("available", free)
	}
	return domain.NewProblem(domain.CodeSeatsNotTogether,
		"no %d seats side by side are left; ask for fewer, or allow seats apart", n).WithMeta("available", free)
}

func (s *Server) confirmGroup(c *fiber.Ctx) error {
	user, err := caller(c)
	if err != nil {
		return answer(c, 0, nil, err)
	}
	ev, err1 := strconv.ParseInt(c.Params("id"), 10, 64)
	hold, err2 := strconv.ParseInt(c.Params("holdId"), 10, 64)
	var in struct {
		PaymentReference string `json:"paymentReference"`
	}
	if errors.Join(err1, err2) != nil || json.Unmarshal(c.Body(), &in) != nil || in.PaymentReference == "" {
		return answer(c, 0, nil, domain.Invalid(`body must be {"paymentReference": "…"}, under numeric ids`))
	}
	h, err := s.confirmSeats(c.UserContext(), ev, hold, user, in.PaymentReference)
	return answer(c, http.StatusOK, h, err)
}

// confirmSeats is the confirm's transaction: the hold's row locked, the
// hold confirmed if it is still live, its seats sold.
func (s *Server) confirmSeats(ctx context.Context, ev, holdID int64, user, payment string) (client.SeatHold, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return client.SeatHold{}, fmt.Errorf("baseline: begin confirm: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	var owner string
	var row int64
	err = tx.QueryRow(ctx, s.group.readHold, holdID, ev).Scan(&owner, &row)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && owner != user {
		return client.SeatHold{}, domain.NewProblem(domain.CodeNotFound, "no hold %d of yours for this event", holdID)
	}
	if err != nil {
		return client.SeatHold{}, fmt.Errorf("baseline: read hold: %w", err)
	}
	if _, err := tx.Exec(ctx, s.group.lockWait, row); err != nil {
		return client.SeatHold{}, fmt.Errorf("baseline: lock row: %w", err)
	}
	h := client.SeatHold{HoldID: holdID, EventID: ev, UserID: user}
	var status string
	var same bool
	if err := tx.QueryRow(ctx, s.group.confirm, holdID, payment).Scan(&h.SeatIDs, &status, &h.ExpiresAt, &h.PaymentReference, &same); err != nil {
		return client.SeatHold{}, fmt.Errorf("baseline: confirm: %w", err)
	}
	if status != "CONFIRMED" {
		return client.SeatHold{}, domain.NewProblem(domain.CodeHoldExpired, "hold %d expired at %s; hold seats again", holdID, h.ExpiresAt.UTC().Format(time.RFC3339))
	}
	if !same {
		return client.SeatHold{}, domain.NewProblem(domain.CodeConflict, "hold %d is confirmed already, with another payment reference", holdID)
	}
	var sold int
	if err := tx.QueryRow(ctx, s.group.sell, h.SeatIDs, holdID, row).Scan(&sold); err != nil {
		return client.SeatHold{}, fmt.Errorf("baseline: sell seats: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return client.SeatHold{}, fmt.Errorf("baseline: commit confirm: %w", err)
	}
	h.Status, h.ExpiresAt = "confirmed", h.ExpiresAt.UTC()
	ref := fmt.Sprintf("O-%06d", holdID)
	h.BookingReference = &ref
	return h, nil
}
