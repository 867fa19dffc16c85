package loadtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/holdfast/holdfast/client"
)

// violations collects invariant violations found during a run.
type violations struct {
	mu   sync.Mutex
	list []string
}

func (v *violations) add(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.list) < 20 {
		v.list = append(v.list, fmt.Sprintf(format, args...))
	}
}

func (v *violations) all() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.list...)
}

// seatBook records who got which seat and finds duplicates either way.
type seatBook struct {
	mu      sync.Mutex
	bySeat  map[int64]string
	byUser  map[string]int64
	soldOut int
	bad     violations
}

func newSeatBook() *seatBook {
	return &seatBook{bySeat: map[int64]string{}, byUser: map[string]int64{}}
}

func (b *seatBook) won(user string, seat int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if other, ok := b.bySeat[seat]; ok {
		b.bad.add("seat %d given to %s and to %s", seat, other, user)
	}
	if other, ok := b.byUser[user]; ok {
		b.bad.add("user %s got seats %d and %d", user, other, seat)
	}
	b.bySeat[seat] = user
	b.byUser[user] = seat
}

func (b *seatBook) sold() {
	b.mu.Lock()
	b.soldOut++
	b.mu.Unlock()
}

// check compares what the clients were told with the seats the API lists as
// still available: every seat is either won by exactly one user or free, no
// more seats were given than exist, and nobody was told SOLD_OUT while a
// seat stayed free.
func (b *seatBook) check(ctx context.Context, e *Env, eventID int64, seats, users int) ([]string, error) {
	free, err := e.Admin.Seats(ctx, eventID, "available")
	if err != nil {
		return nil, err
	}
	out := b.bad.all()
	won := len(b.bySeat)
	if won > seats {
		out = append(out, fmt.Sprintf("oversold: %d seats given for %d", won, seats))
	}
	if won+len(free) != seats {
		out = append(out, fmt.Sprintf("%d seats won + %d listed free != %d seats", won, len(free), seats))
	}
	for _, s := range free {
		if u, ok := b.bySeat[s.SeatID]; ok {
			out = append(out, fmt.Sprintf("seat %d listed free but given to %s", s.SeatID, u))
		}
	}
	if b.soldOut > 0 && len(free) > 0 {
		out = append(out, fmt.Sprintf("%d users told SOLD_OUT while %d seats stayed free", b.soldOut, len(free)))
	}
	if want := min(seats, users); won != want && b.soldOut > 0 {
		out = append(out, fmt.Sprintf("%d seats given, want %d", won, want))
	}
	return out, nil
}

// fcfsRush: Users users grab the next free seat of one event with Seats
// seats, each exactly once.
type fcfsRush struct {
	eventID    int64
	seats      int
	users      int
	book       *seatBook
	order      orderBook
	orderFound *OrderReport
	// pending holds the accepted requests of an intake-only run.
	mu      sync.Mutex
	pending []pendingWrite
}

// pendingWrite is a grab accepted on event ev, as its client c saw it.
type pendingWrite struct {
	ev        *fcfsRush
	c         *client.Client
	user      string
	acc       client.Accepted
	at, acked time.Time
}

func (s *fcfsRush) Setup(ctx context.Context, e *Env) (int, error) {
	err := s.open(ctx, e, "fcfs rush", orDefault(e.Opt.Seats, 1000), orDefault(e.Opt.Users, 2000))
	return s.users, err
}

// open creates the event, named name and the run's id, with seats seats,
// for users users' grabs.
func (s *fcfsRush) open(ctx context.Context, e *Env, name string, seats, users int) error {
	s.seats, s.users = seats, users
	s.book = newSeatBook()
	ev, err := e.Admin.CreateEvent(ctx, client.NewEvent{Name: name + " " + e.RunID, SeatCount: s.seats})
	if err != nil {
		return err
	}
	s.eventID = ev.EventID
	return nil
}

func orDefault(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

func (s *fcfsRush) Journey(ctx context.Context, e *Env, i int) error {
	_, err := s.grab(ctx, e, i, e.Opt.Intake)
	return err
}

// grab submits user i's grab of the next free seat. With keep, the write
// is kept for follow and its outcome not waited for (not even with
// Prefer: wait); else its outcome is awaited, recorded and returned.
func (s *fcfsRush) grab(ctx context.Context, e *Env, i int, keep bool) (client.Outcome, error) {
	c, user, err := e.User(i)
	if err != nil {
		return client.Outcome{}, err
	}
	if keep {
		c.PreferWait = 0 // c is this grab's own copy
	}
	phone := fmt.Sprintf("+8210%08d", i%100_000_000)
	submit := func(ctx context.Context) (client.Accepted, error) { return c.FCFS(ctx, s.eventID, phone) }
	acc, at, err := e.submit(ctx, "fcfs", submit)
	if err != nil {
		return client.Outcome{}, err
	}
	p := pendingWrite{ev: s, c: c, user: user, acc: acc, at: at, acked: time.Now()}
	if keep {
		s.mu.Lock()
		s.pending = append(s.pending, p)
		s.mu.Unlock()
		return client.Outcome{}, nil
	}
	return p.follow(ctx, e)
}

// follow awaits a grab's outcome and records it.
func (p pendingWrite) follow(ctx context.Context, e *Env) (client.Outcome, error) {
	out, err := e.await(ctx, p.c, "fcfs", p.acc, p.at)
	if err != nil {
		return out, err
	}
	return out, p.record(out)
}

// record books the grab's outcome in its event's seats and order.
func (p pendingWrite) record(out client.Outcome) error {
	var r client.FCFSResult
	switch err := out.Decode(&r); {
	case err == nil:
		p.ev.book.won(p.user, r.SeatID)
		p.ev.order.add(ordered{user: p.user, sent: p.at, acked: p.acked, seat: r.SeatID})
	case client.IsCode(err, client.CodeSoldOut):
		p.ev.book.sold()
		p.ev.order.add(ordered{user: p.user, sent: p.at, acked: p.acked, soldOut: true})
	case client.IsCode(err, client.CodeContention):
	default:
		return fmt.Errorf("fcfs for %s: %w", p.user, err)
	}
	return nil
}

// Finish follows an intake-only run's requests to their outcomes.
func (s *fcfsRush) Finish(ctx context.Context, e *Env) error {
	return followAll(ctx, e, []*fcfsRush{s}, nil)
}

// followAll follows the grabs kept on events to their outcomes, on
// e.Opt.Concurrency clients, and hands each terminal outcome to seen when
// it is not nil.
func followAll(ctx context.Context, e *Env, events []*fcfsRush, seen func(client.Outcome)) error {
	var all []pendingWrite
	for _, ev := range events {
		ev.mu.Lock()
		all = append(all, ev.pending...)
		ev.mu.Unlock()
	}
	return forEach(len(all), e.Opt.Concurrency, func(i int) error {
		out, err := all[i].follow(ctx, e)
		if seen != nil && out.Terminal() {
			seen(out)
		}
		return err
	})
}

func (s *fcfsRush) Check(ctx context.Context, e *Env) ([]string, error) {
	out, err := s.book.check(ctx, e, s.eventID, s.seats, s.users)
	if err != nil {
		return nil, err
	}
	bad, pairs, checked := s.order.violations()
	s.orderFound = &OrderReport{PairsChecked: checked, OutOfOrder: pairs}
	return append(out, bad...), nil
}

func (s *fcfsRush) report(r *Report) { r.Order = s.orderFound }

// forEach runs f(0..n-1) on up to workers goroutines and returns the first
// error.
func forEach(n, workers int, f func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(max(1, workers))
	for i := range n {
		g.Go(func() error { return f(i) })
	}
	return g.Wait()
}
