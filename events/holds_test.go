package events

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/requests"
)

// holdRig applies seat-hold batches to one event of a private schema, as
// the worker does, at the times the test gives (keyed.Batch.Now).
type holdRig struct {
	t     *testing.T
	pool  *pgxpool.Pool
	rdb   redis.UniversalClient
	h     *Holds
	e     Event
	seats map[string]int64 // label → id
	seq   int64
}

func newHoldRig(t *testing.T, m SeatMap, set func(*Event)) *holdRig {
	t.Helper()
	_, pool := testenv.Postgres(t)
	_, rdb := testenv.Redis(t)
	e := newEventSettings()
	e.Name = "holds"
	if set != nil {
		set(&e)
	}
	ctx := context.Background()
	e, err := NewCatalog(pool).CreateEvent(ctx, e, m)
	require.NoError(t, err)
	room := NewRoom(rdb, "a-secret-long-enough-for-hs256-0123456789")
	require.NoError(t, room.Configure(ctx, e))
	r := &holdRig{t: t, pool: pool, rdb: rdb, e: e, seats: map[string]int64{},
		h: &Holds{Counts: NewCounts(pool, rdb), Room: room}}
	seats, _, err := NewCatalog(pool).Seats(ctx, e.EventID, "")
	require.NoError(t, err)
	for _, s := range seats {
		r.seats[s.Label] = s.SeatID
	}
	return r
}

// req is one request of a batch.
type req struct {
	typ, user string
	payload   any
}

func (r *holdRig) holdReq(user string, p HoldPayload) req {
	p.EventID = r.e.EventID
	return req{TypeSeatHold, user, p}
}

func (r *holdRig) actReq(typ, user string, hold int64, payment string) req {
	return req{typ, user, HoldActionPayload{EventID: r.e.EventID, HoldID: hold, PaymentReference: payment}}
}

func (r *holdRig) batch(now time.Time, rs ...req) *keyed.Batch {
	b := &keyed.Batch{Now: now}
	for _, q := range rs {
		body, err := json.Marshal(q.payload)
		require.NoError(r.t, err)
		r.seq++
		b.Requests = append(b.Requests, &requests.Request{ID: uuid.New(), Seq: r.seq, Type: q.typ, UserID: q.user,
			Payload: body, AcceptedAt: now})
	}
	return b
}

// apply applies one batch of rs at now and commits it.
func (r *holdRig) apply(now time.Time, rs ...req) []requests.Outcome {
	r.t.Helper()
	ctx := context.Background()
	b := r.batch(now, rs...)
	var outs []requests.Outcome
	require.NoError(r.t, pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		var err error
		outs, err = r.h.apply(ctx, tx, b)
		return err
	}))
	b.Committed(ctx)
	return outs
}

// held returns the hold of a succeeded outcome.
func held(t *testing.T, o requests.Outcome) HoldResult {
	t.Helper()
	require.Equal(t, domain.StatusSucceeded, o.Status, "%+v", o.Problem)
	return o.Result.(HoldResult)
}

// rejected checks that o was rejected with code and returns the
// rejection's meta.
func rejected(t *testing.T, o requests.Outcome, code string) map[string]any {
	t.Helper()
	require.Equal(t, domain.StatusRejected, o.Status, "%+v", o.Result)
	require.Equal(t, code, o.Problem.Code, o.Problem.Message)
	return o.Problem.Meta
}

func (r *holdRig) labels(ids []int64) []string {
	byID := map[int64]string{}
	for l, id := range r.seats {
		byID[id] = l
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = byID[id]
	}
	return out
}

// A map of two sections: Front (rows A of 4 and B of 6) before Back (row
// C of 10). Seat A-2 is held first, leaving no three side by side in row
// A: a group of three gets B 1–3 (Front before Back, row B before any gap
// in A); a group of four that asks for Back gets C 1–4; a group of seven
// finds no seven side by side and is refused, all or nothing, unless it
// allows seats apart, when it gets the seven best free seats in the map's
// order. Seats named one by one are held all or none.
func TestBestAvailableSeatsAGroupTogetherBestSectionFirst(t *testing.T) {
	t.Parallel()
	r := newHoldRig(t, SeatMap{
		{Name: "Front", PriceTier: "A", Rows: []Row{{Label: "A", Seats: 4}, {Label: "B", Seats: 6}}},
		{Name: "Back", PriceTier: "B", Rows: []Row{{Label: "C", Seats: 10}}},
	}, func(e *Event) { e.MaxSeatsPerUser = 10 })
	now := time.Now()
	outs := r.apply(now,
		r.holdReq("solo", HoldPayload{SeatIDs: []int64{r.seats["Front A-2"]}}),
		r.holdReq("trio", HoldPayload{Quantity: 3}),
		r.holdReq("back4", HoldPayload{Quantity: 4, Section: "Back"}),
		r.holdReq("seven", HoldPayload{Quantity: 7}),
		r.holdReq("seven-apart", HoldPayload{Quantity: 7, Apart: true}),
		r.holdReq("pair", HoldPayload{SeatIDs: []int64{r.seats["Front A-1"], r.seats["Front A-2"]}}),
	)
	require.Equal(t, []string{"Front A-2"}, r.labels(held(t, outs[0]).SeatIDs))
	require.Equal(t, []string{"Front B-1", "Front B-2", "Front B-3"}, r.labels(held(t, outs[1]).SeatIDs))
	require.Equal(t, []string{"Back C-1", "Back C-2", "Back C-3", "Back C-4"}, r.labels(held(t, outs[2]).SeatIDs))
	p := rejected(t, outs[3], domain.CodeSeatsNotTogether)
	require.EqualValues(t, 12, p["available"])
	require.Equal(t, []string{"Front A-1", "Front A-3", "Front A-4", "Front B-4", "Front B-5", "Front B-6", "Back C-5"},
		r.labels(held(t, outs[4]).SeatIDs))
	rejected(t, outs[5], domain.CodeSeatTaken)

	seats, _, err := NewCatalog(r.pool).Seats(context.Background(), r.e.EventID, "available")
	require.NoError(t, err)
	var free []string
	for _, s := range seats {
		free = append(free, s.Label)
	}
	require.Equal(t, []string{"Back C-6", "Back C-7", "Back C-8", "Back C-9", "Back C-10"}, free,
		"nothing held for the refused requests")
	rejected(t, r.apply(now, r.holdReq("six", HoldPayload{Quantity: 6, Apart: true}))[0], domain.CodeSoldOut)
}

// A hold lasts seatHoldSeconds from its batch's time. A batch a millisecond
// before the expiry finds the seat held; one at the expiry takes it, with
// no sweep run in between. The readers judge by Postgres' clock alone: a
// hold whose time has come is expired in the holds list, its seat
// available in the seat list and counted in the remaining seats, before
// any sweep; the sweep then frees it without counting it twice.
func TestHoldExpiresAtItsTime(t *testing.T) {
	t.Parallel()
	r := newHoldRig(t, nil, func(e *Event) { e.TotalSeats, e.SeatHoldSeconds = 1, 600 })
	seat := []int64{r.seats["1"]}
	t0 := time.Now()
	h := held(t, r.apply(t0, r.holdReq("first", HoldPayload{SeatIDs: seat}))[0])
	require.Equal(t, t0.Add(600*time.Second).UTC(), h.ExpiresAt)
	rejected(t, r.apply(h.ExpiresAt.Add(-time.Millisecond), r.holdReq("early", HoldPayload{SeatIDs: seat}))[0], domain.CodeSeatTaken)
	second := held(t, r.apply(h.ExpiresAt, r.holdReq("on-time", HoldPayload{SeatIDs: seat}))[0])
	rejected(t, r.apply(h.ExpiresAt, r.actReq(TypeHoldConfirm, "first", h.HoldID, "pay-late"))[0], domain.CodeHoldExpired)

	// By Postgres' clock: the second hold is made to have expired a moment
	// ago, as if its ten minutes had passed.
	ctx := context.Background()
	c, counts := NewCatalog(r.pool), r.h.Counts
	left, err := counts.Remaining(ctx, r.e.EventID)
	require.NoError(t, err)
	require.Zero(t, left, "held")
	_, err = r.pool.Exec(ctx, `UPDATE seat_holds SET expires_at = now() - interval '1 millisecond' WHERE id = $1`, second.HoldID)
	require.NoError(t, err)
	_, err = counts.Recount(ctx, r.e.EventID) // the expiry set learns the new time
	require.NoError(t, err)
	holds, err := c.Holds(ctx, r.e.EventID, "on-time")
	require.NoError(t, err)
	require.Equal(t, "expired", holds[0].Status)
	seats, _, err := c.Seats(ctx, r.e.EventID, "available")
	require.NoError(t, err)
	require.Len(t, seats, 1)
	left, err = counts.Remaining(ctx, r.e.EventID)
	require.NoError(t, err)
	require.EqualValues(t, 1, left, "counted back at its expiry, before any sweep")

	require.NoError(t, r.h.Sweep(ctx, r.pool))
	left, err = counts.Remaining(ctx, r.e.EventID)
	require.NoError(t, err)
	require.EqualValues(t, 1, left, "the sweep frees it once")
	var taken int
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT seats_taken FROM events WHERE id = $1`, r.e.EventID).Scan(&taken))
	require.Zero(t, taken)

	// An ended hold is kept a day (holdRetention), then deleted.
	_, err = r.pool.Exec(ctx, `UPDATE seat_holds SET updated_at = now() - interval '25 hours' WHERE id = $1`, h.HoldID)
	require.NoError(t, err)
	require.NoError(t, r.h.Sweep(ctx, r.pool))
	var kept []int64
	rows, err := r.pool.Query(ctx, `SELECT id FROM seat_holds ORDER BY id`)
	require.NoError(t, err)
	kept, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{second.HoldID}, kept, "the first hold, ended a day ago, is gone")
}

// A confirmation with a payment reference makes the hold an order with a
// booking reference; the same reference again gets the same answer and
// changes nothing; another reference is a conflict. A confirmed hold is
// not released here; another user's hold is not found; a released one
// cannot be confirmed, and releasing it again answers as it stands.
func TestConfirmIsIdempotentByPaymentReference(t *testing.T) {
	t.Parallel()
	r := newHoldRig(t, nil, func(e *Event) { e.TotalSeats = 4 })
	now := time.Now()
	outs := r.apply(now, r.holdReq("fan", HoldPayload{Quantity: 2}), r.holdReq("fan", HoldPayload{Quantity: 1}))
	a, b := held(t, outs[0]), held(t, outs[1])
	outs = r.apply(now.Add(time.Second),
		r.actReq(TypeHoldConfirm, "fan", a.HoldID, "pay-1"),
		r.actReq(TypeHoldConfirm, "fan", a.HoldID, "pay-1"),
		r.actReq(TypeHoldConfirm, "fan", a.HoldID, "pay-2"),
		r.actReq(TypeHoldConfirm, "someone-else", b.HoldID, "pay-3"),
		r.actReq(TypeHoldRelease, "fan", b.HoldID, ""),
	)
	first := held(t, outs[0])
	require.Equal(t, "confirmed", first.Status)
	require.Equal(t, BookingReference(refOrder, a.HoldID), *first.BookingReference)
	require.Equal(t, first, held(t, outs[1]))
	rejected(t, outs[2], domain.CodeConflict)
	rejected(t, outs[3], domain.CodeNotFound)
	require.Equal(t, "released", held(t, outs[4]).Status)

	outs = r.apply(now.Add(2*time.Second),
		r.actReq(TypeHoldConfirm, "fan", a.HoldID, "pay-1"),
		r.actReq(TypeHoldRelease, "fan", a.HoldID, ""),
		r.actReq(TypeHoldConfirm, "fan", b.HoldID, "pay-1"),
		r.actReq(TypeHoldRelease, "fan", b.HoldID, ""),
	)
	require.Equal(t, first, held(t, outs[0]), "a retry after the batch is the same order")
	rejected(t, outs[1], domain.CodeInvalidTransition)
	rejected(t, outs[2], domain.CodeInvalidTransition)
	require.Equal(t, "released", held(t, outs[3]).Status)
	var orders, freeSeats int
	ctx := context.Background()
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT count(*) FROM seat_holds WHERE status = 'CONFIRMED'`).Scan(&orders))
	require.NoError(t, r.pool.QueryRow(ctx, `SELECT total_seats - seats_taken FROM events WHERE id = $1`, r.e.EventID).Scan(&freeSeats))
	require.Equal(t, 1, orders)
	require.Equal(t, 2, freeSeats, "the order's two seats are taken, the released one is back")
}

// maxSeatsPerUser counts a user's held and confirmed seats together; a
// released or expired hold no longer counts.
func TestSeatLimitPerUser(t *testing.T) {
	t.Parallel()
	r := newHoldRig(t, nil, func(e *Event) { e.TotalSeats, e.MaxSeatsPerUser, e.SeatHoldSeconds = 20, 4, 60 })
	now := time.Now()
	outs := r.apply(now,
		r.holdReq("fan", HoldPayload{Quantity: 3}),
		r.holdReq("fan", HoldPayload{Quantity: 2}),
		r.holdReq("fan", HoldPayload{Quantity: 1}),
		r.holdReq("other", HoldPayload{Quantity: 4}),
	)
	a := held(t, outs[0])
	p := rejected(t, outs[1], domain.CodeSeatLimit)
	require.EqualValues(t, 4, p["maxSeatsPerUser"])
	require.EqualValues(t, 3, p["held"])
	held(t, outs[2])
	held(t, outs[3])
	outs = r.apply(now.Add(time.Second),
		r.actReq(TypeHoldConfirm, "fan", a.HoldID, "pay"),
		r.holdReq("fan", HoldPayload{Quantity: 1}),
	)
	held(t, outs[0])
	rejected(t, outs[1], domain.CodeSeatLimit)
	// A minute on, the one-seat hold has expired: one seat may be held again.
	held(t, r.apply(now.Add(61*time.Second), r.holdReq("fan", HoldPayload{Quantity: 1}))[0])
}

// Two groups of four race for the last four seats of a row, their batches
// in flight at once (as a worker that lost its key's lease may still run
// one): the first locks the event and decides; the second waits on that
// lock until the first commits, then finds the seats taken. One group has
// the four seats side by side; the other is refused; no seat is in two
// holds.
//
// Control: the same steps without the lock (the test calls the batch's
// own load, decide and write), interleaved the same way, give the four
// seats to both groups.
func TestHoldRaceOnTheLastSeatsOfARow(t *testing.T) {
	t.Parallel()
	for _, locked := range []bool{true, false} {
		t.Run(map[bool]string{true: "locked", false: "control without the lock"}[locked], func(t *testing.T) {
			t.Parallel()
			r := newHoldRig(t, SeatMap{{Name: "Floor", Rows: []Row{{Label: "A", Seats: 10}}}},
				func(e *Event) { e.MaxSeatsPerUser = 10 })
			now := time.Now()
			held(t, r.apply(now, r.holdReq("early", HoldPayload{Quantity: 6}))[0])
			outs := raceTwoGroups(t, r, now, locked)
			var won, refused int
			for _, o := range outs {
				if o.Status == domain.StatusSucceeded {
					won++
					require.Equal(t, []string{"Floor A-7", "Floor A-8", "Floor A-9", "Floor A-10"}, r.labels(o.Result.(HoldResult).SeatIDs))
				} else {
					refused++
				}
			}
			var twice int
			require.NoError(t, r.pool.QueryRow(context.Background(), `SELECT count(*) FROM (
				SELECT s FROM seat_holds, unnest(seat_ids) AS s WHERE status = 'HELD' GROUP BY s HAVING count(*) > 1) d`).Scan(&twice))
			if locked {
				require.Equal(t, 1, won)
				require.Equal(t, 1, refused)
				require.Zero(t, twice, "no seat in two holds")
				return
			}
			require.Equal(t, 2, won, "control: both groups were given the seats")
			require.Equal(t, 4, twice, "control: four seats in two holds")
		})
	}
}

// raceTwoGroups runs two batches of a group of four each. The first
// batch's transaction stays open until the second has read the seats
// (control) or is seen waiting on the event's lock (locked); then the first
// commits, and the second finishes.
func raceTwoGroups(t *testing.T, r *holdRig, now time.Time, locked bool) []requests.Outcome {
	ctx := context.Background()
	batches := []*keyed.Batch{r.batch(now, r.holdReq("group1", HoldPayload{Quantity: 4})),
		r.batch(now, r.holdReq("group2", HoldPayload{Quantity: 4}))}
	step := func(ctx context.Context, tx pgx.Tx, b *keyed.Batch, read chan<- struct{}) ([]requests.Outcome, error) {
		if locked {
			return r.h.apply(ctx, tx, b)
		}
		ev, writes, outs := holdsEvent(b)
		run, err := loadHolds(ctx, tx, b, ev, writes)
		if err != nil {
			return nil, err
		}
		close(read)
		run.decide(b, writes, outs)
		_, err = run.write(ctx, tx, b.Now)
		return outs, err
	}
	tx1, err := r.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx1.Rollback(ctx) }()
	first, err := step(ctx, tx1, batches[0], make(chan struct{}))
	require.NoError(t, err)

	type result struct {
		outs []requests.Outcome
		err  error
	}
	done, read := make(chan result, 1), make(chan struct{})
	conn, err := r.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var pid int
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	go func() {
		var outs []requests.Outcome
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var err error
			outs, err = step(ctx, tx, batches[1], read)
			return err
		})
		done <- result{outs, err}
	}()
	if locked {
		waitOnLock(t, r.pool, pid)
	} else {
		<-read
	}
	require.NoError(t, tx1.Commit(ctx))
	second := <-done
	require.NoError(t, second.err)
	return append(first, second.outs...)
}

// waitOnLock waits until backend pid waits on a lock.
func waitOnLock(t *testing.T, pool *pgxpool.Pool, pid int) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting bool
		err := pool.QueryRow(context.Background(), `SELECT coalesce(wait_event_type = 'Lock', false)
			FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting)
		return err == nil && waiting
	}, 30*time.Second, 5*time.Millisecond, fmt.Sprintf("backend %d never waited on the event's lock", pid))
}

// After a sell-out, seats that come free go to the line, in its order.
// The line is u0…u3; u0 is admitted before the sale sells out and holds
// nothing. Two buyers hold the event's two seats: it is sold out, u0's
// token lapses, and nobody is ready. The first buyer releases its seat:
// u1, first in line, becomes ready, u2 does not; u1 takes its token and
// holds the seat, giving its token back. The second buyer's hold expires
// (the periodic sweep frees it): u2 becomes ready, u3 still waits.
func TestReleasedSeatsGoToTheLineInOrder(t *testing.T) {
	t.Parallel()
	r := newHoldRig(t, nil, func(e *Event) { e.TotalSeats, e.MaxConcurrent, e.SeatHoldSeconds = 2, 10, 60 })
	ctx := context.Background()
	room, e := r.h.Room, r.e
	for i := range 4 {
		_, err := enterHeld(room, e, fmt.Sprintf("u%d", i), int64(i+1))
		require.NoError(t, err)
	}
	status := func(user string) Status {
		t.Helper()
		st, err := room.Status(ctx, e, user)
		require.NoError(t, err)
		return st
	}
	a, err := room.Issue(ctx, e, "u0")
	require.NoError(t, err)
	require.NotEmpty(t, a.Token, "before the sell-out the room admits as usual")

	now := time.Now()
	outs := r.apply(now, r.holdReq("buyer1", HoldPayload{Quantity: 1}), r.holdReq("buyer2", HoldPayload{Quantity: 1}))
	first, second := held(t, outs[0]), held(t, outs[1])
	valid, err := room.Valid(ctx, e, "u0")
	require.NoError(t, err)
	require.False(t, valid, "the tokens of users admitted before the sell-out lapse")
	for _, u := range []string{"u1", "u2", "u3"} {
		st := status(u)
		require.Equal(t, "waiting", st.Status, u)
		require.True(t, st.SoldOut, u)
	}

	held(t, r.apply(now.Add(time.Second), r.actReq(TypeHoldRelease, "buyer1", first.HoldID, ""))[0])
	require.Equal(t, "ready", status("u1").Status)
	require.Equal(t, "waiting", status("u2").Status)
	a, err = room.Issue(ctx, e, "u1")
	require.NoError(t, err)
	require.NotEmpty(t, a.Token)
	require.Equal(t, "waiting", status("u2").Status, "the seat is offered to u1 alone")
	mine := held(t, r.apply(now.Add(2*time.Second), r.holdReq("u1", HoldPayload{Quantity: 1}))[0])
	require.Equal(t, first.SeatIDs, mine.SeatIDs)
	require.Equal(t, "not_queued", status("u1").Status, "u1 gave its token back")
	require.Equal(t, "waiting", status("u2").Status)

	_, err = r.pool.Exec(ctx, `UPDATE seat_holds SET expires_at = now() - interval '1 millisecond' WHERE id = $1`, second.HoldID)
	require.NoError(t, err)
	require.NoError(t, r.h.Sweep(ctx, r.pool))
	require.Equal(t, "ready", status("u2").Status)
	require.Equal(t, "waiting", status("u3").Status)
}

// A hold made and released in one batch gives its seat back from the next
// batch on: a later request of the same batch cannot take it, or the
// release's write would free a seat that request holds.
func TestASeatReleasedInABatchIsOfferedFromTheNext(t *testing.T) {
	t.Parallel()
	r := newHoldRig(t, nil, func(e *Event) { e.TotalSeats = 3 })
	now := time.Now()
	first := held(t, r.apply(now, r.holdReq("x", HoldPayload{SeatIDs: []int64{r.seats["3"]}}))[0])
	next, seat := first.HoldID+1, r.seats["1"] // the id this batch's first hold gets
	outs := r.apply(now.Add(time.Second),
		r.holdReq("a", HoldPayload{SeatIDs: []int64{seat}}),
		r.actReq(TypeHoldRelease, "a", next, ""),
		r.holdReq("b", HoldPayload{SeatIDs: []int64{seat}}))
	require.Equal(t, next, held(t, outs[0]).HoldID)
	require.Equal(t, "released", held(t, outs[1]).Status)
	rejected(t, outs[2], domain.CodeSeatTaken)
	held(t, r.apply(now.Add(2*time.Second), r.holdReq("c", HoldPayload{SeatIDs: []int64{seat}}))[0])
	rejected(t, r.apply(now.Add(3*time.Second), r.holdReq("d", HoldPayload{SeatIDs: []int64{seat}}))[0], domain.CodeSeatTaken)
}

// A seat whose hold has expired is free for FCFS and for the one-seat
// booking at once, as for the holds' own batches, before any sweep; the
// remaining count is not doubled by it.
func TestExpiredHoldsSeatsAreFreeForFCFSAndBooking(t *testing.T) {
	t.Parallel()
	r := newHoldRig(t, nil, func(e *Event) { e.TotalSeats = 2 })
	ctx := context.Background()
	now := time.Now()
	h := held(t, r.apply(now, r.holdReq("x", HoldPayload{Quantity: 2}))[0])
	later := h.ExpiresAt.Add(time.Second)
	f := NewFCFS(0)
	f.Counts = r.h.Counts
	w := &RoomWrites{Room: r.h.Room, Counts: r.h.Counts}
	var outs []requests.Outcome
	b := r.batch(later, req{TypeFCFS, "grabber", FCFSPayload{EventID: r.e.EventID}})
	require.NoError(t, pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		var err error
		outs, err = f.apply(ctx, tx, b)
		return err
	}))
	b.Committed(ctx)
	require.Equal(t, domain.StatusSucceeded, outs[0].Status, "%+v", outs[0].Problem)
	left, err := r.h.Counts.Remaining(ctx, r.e.EventID)
	require.NoError(t, err)
	require.EqualValues(t, 1, left, "one of the two freed seats granted")

	b = r.batch(later, req{TypeSeatBook, "booker", BookPayload{EventID: r.e.EventID, SeatID: h.SeatIDs[1]}})
	var out requests.Outcome
	require.NoError(t, pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		var err error
		out, err = w.book(ctx, tx, b, b.Requests[0], &BookPayload{EventID: r.e.EventID, SeatID: h.SeatIDs[1]})
		return err
	}))
	b.Committed(ctx)
	require.Equal(t, domain.StatusSucceeded, out.Status, "%+v", out.Problem)
	left, err = r.h.Counts.Remaining(ctx, r.e.EventID)
	require.NoError(t, err)
	require.Zero(t, left)
}

// The room's offer of released seats is set again from Postgres by the
// periodic task: a release whose write to the room was lost (a crash
// after its commit) still makes the next user in line ready.
func TestTheLineIsOfferedSeatsAfterALostWrite(t *testing.T) {
	t.Parallel()
	r := newHoldRig(t, nil, func(e *Event) { e.TotalSeats, e.MaxConcurrent = 1, 10 })
	ctx := context.Background()
	room, e := r.h.Room, r.e
	_, err := enterHeld(room, e, "u1", 1)
	require.NoError(t, err)
	now := time.Now()
	h := held(t, r.apply(now, r.holdReq("buyer", HoldPayload{Quantity: 1}))[0])
	st, err := room.Status(ctx, e, "u1")
	require.NoError(t, err)
	require.True(t, st.SoldOut)
	r.h.Room = nil // the release commits; its write to the room is lost
	held(t, r.apply(now.Add(time.Second), r.actReq(TypeHoldRelease, "buyer", h.HoldID, ""))[0])
	r.h.Room = room
	st, err = room.Status(ctx, e, "u1")
	require.NoError(t, err)
	require.Equal(t, "waiting", st.Status, "control: the room has not heard of the release")

	require.NoError(t, NewRooms(r.pool, room, NewSealer(r.pool, room), r.h.Counts).Reconcile(ctx))
	st, err = room.Status(ctx, e, "u1")
	require.NoError(t, err)
	require.Equal(t, "ready", st.Status)

	// A room whose settings Redis lost is sold out again from Postgres.
	require.NoError(t, r.rdb.Del(ctx, roomKey(e.EventID, "cfg")).Err())
	held(t, r.apply(now.Add(2*time.Second), r.holdReq("buyer2", HoldPayload{Quantity: 1}))[0])
	require.NoError(t, r.rdb.Del(ctx, roomKey(e.EventID, "cfg")).Err())
	require.NoError(t, NewRooms(r.pool, room, NewSealer(r.pool, room), r.h.Counts).Reconcile(ctx))
	st, err = room.Status(ctx, e, "u1")
	require.NoError(t, err)
	require.True(t, st.SoldOut, "%+v", st)
}
