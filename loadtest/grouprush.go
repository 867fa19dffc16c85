package loadtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/bench/baseline"
	"github.com/holdfast/holdfast/client"
)

// The group rush: fans of one event with a seat map (10 sections of 20
// rows of 50 seats: 10,000 seats) each ask for a group of one to six
// best-available seats side by side in one row; of the holds granted, two
// thirds are confirmed and a third let expire. Holds last a few seconds
// (SeatHoldSeconds, 5: holdfast's run of 20,000 fans lasts about ten on two
// cores, and confirms come within a second or two on either design), so
// the seats of the expired ones go back to the fans still asking within
// the run. group-rush runs it against holdfast,
// baseline-group-rush against cmd/baseline's group modes (one transaction
// per request that locks a row of the map), with the same fans: fan i's
// group and fate depend only on the seed and i. The checks read the
// design's tables (groupcheck.go).

const (
	groupRowsPerSection = 20
	groupSeatsPerRow    = 50
	groupMaxSize        = 6 // a group, and maxSeatsPerUser
	defaultGroupSeats   = 10_000
	defaultGroupFans    = 20_000
	defaultHoldSeconds  = 5
)

// GroupReport is what a group rush saw, for make bench's group section.
type GroupReport struct {
	Sections    int `json:"sections"`
	Seats       int `json:"seats"`
	Fans        int `json:"fans"`
	HoldSeconds int `json:"holdSeconds"`
	SeatsAsked  int `json:"seatsAsked"`
	Granted     int `json:"granted"`
	SoldOut     int `json:"soldOut"`     // refused SOLD_OUT
	NotTogether int `json:"notTogether"` // refused SEATS_NOT_TOGETHER
	Confirmed   int `json:"confirmed"`
	// ConfirmsRefused counts confirms answered HOLD_EXPIRED: the fan was
	// too slow for the hold's time.
	ConfirmsRefused int `json:"confirmsRefused"`
	LetExpire       int `json:"letExpire"`
	// Read from the design's tables at the end, once every hold has
	// expired or been confirmed: seats sold, holds expired, seats held more
	// than once over the run (given again after an expiry), and the
	// violations found of each kind.
	SeatsSold     int `json:"seatsSold"`
	HoldsExpired  int `json:"holdsExpired"`
	SeatsReheld   int `json:"seatsReheld"`
	DoubleHeld    int `json:"doubleHeld"`    // a seat in two live holds or orders at once
	NotSideBySide int `json:"notSideBySide"` // a hold's seats not side by side in one row
}

// groupChoice is what fan i of a group rush does.
type groupChoice struct {
	size    int  // seats asked for, side by side
	confirm bool // a granted hold is confirmed, else let expire
}

func groupChoiceOf(seed uint64, i int) groupChoice {
	rng := rand.New(rand.NewPCG(seed, uint64(i)^0x67726f7570))
	return groupChoice{size: 1 + rng.IntN(groupMaxSize), confirm: rng.IntN(3) < 2}
}

// groupMap is a map of seats seats: sections of 20 rows of 50 seats (of
// fewer, at least 6, for fewer than 2,000 seats, so a small run still has
// two sections), the last row short if it must be.
func groupMap(seats int) []client.Section {
	perRow := groupSeatsPerRow
	if seats < 2000 {
		perRow = max(groupMaxSize, seats/(2*groupRowsPerSection))
	}
	var m []client.Section
	for left := seats; left > 0; {
		s := client.Section{Name: fmt.Sprintf("S%02d", len(m)+1), PriceTier: fmt.Sprint(len(m) + 1)}
		for r := 0; r < groupRowsPerSection && left > 0; r++ {
			n := min(perRow, left)
			s.Rows = append(s.Rows, client.Row{Label: fmt.Sprint(r + 1), Seats: n})
			left -= n
		}
		m = append(m, s)
	}
	return m
}

// toldHold is a hold a fan was told of, and what came of it.
type toldHold struct {
	user      string
	seats     []int64
	confirm   bool // the fan's fate
	confirmed bool // and the API's answer to its confirm
}

// groupBook runs a group rush's journeys and records what the clients
// were told, to check it against the design's tables.
type groupBook struct {
	seed    uint64
	fans    int
	eventID int64

	mu     sync.Mutex
	told   map[int64]*toldHold // by hold id
	report GroupReport
}

func newGroupBook(seed uint64, fans, seats, holdSeconds int) *groupBook {
	return &groupBook{seed: seed, fans: fans, told: map[int64]*toldHold{},
		report: GroupReport{Sections: len(groupMap(seats)), Seats: seats, Fans: fans, HoldSeconds: holdSeconds}}
}

// setup sizes the rush from e's options and creates its event with api,
// which answers holdfast's event creation (holdfast's API or the baseline).
func (b *groupBook) setup(ctx context.Context, e *Env, api *client.Client) error {
	if e.Opt.DatabaseURL == "" {
		return errors.New("the group rush's checks read the design's Postgres: set -database-url")
	}
	no, size := false, groupMaxSize
	ev, err := api.CreateEvent(ctx, client.NewEvent{Name: "group rush " + e.RunID, Sections: groupMap(b.report.Seats),
		EventSettings: client.EventSettings{EntryTokenRequired: &no, SeatHoldSeconds: &b.report.HoldSeconds, MaxSeatsPerUser: &size}})
	if err != nil {
		return err
	}
	if ev.TotalSeats != b.report.Seats {
		return fmt.Errorf("the event has %d seats, not %d", ev.TotalSeats, b.report.Seats)
	}
	b.eventID = ev.EventID
	return nil
}

func (b *groupBook) count(n *int, by int) {
	b.mu.Lock()
	*n += by
	b.mu.Unlock()
}

// journey is fan i's: a group's hold, then, if granted, its fate.
func (b *groupBook) journey(ctx context.Context, w writer, i int, user string) error {
	ch := groupChoiceOf(b.seed, i)
	b.count(&b.report.SeatsAsked, ch.size)
	holds := fmt.Sprintf("/api/v1/events/%d/holds", b.eventID)
	out, err := w.write(ctx, "seat.hold", http.MethodPost, holds, map[string]int{"quantity": ch.size})
	if err != nil {
		return err
	}
	var h client.SeatHold
	switch err := out.Decode(&h); {
	case client.IsCode(err, client.CodeSoldOut):
		b.count(&b.report.SoldOut, 1)
		return nil
	case client.IsCode(err, client.CodeSeatsNotTogether):
		b.count(&b.report.NotTogether, 1)
		return nil
	case err != nil:
		return fmt.Errorf("hold for %s: %w", user, err)
	}
	t := &toldHold{user: user, seats: h.SeatIDs, confirm: ch.confirm}
	b.mu.Lock()
	b.told[h.HoldID] = t
	b.report.Granted++
	if !ch.confirm {
		b.report.LetExpire++
	}
	b.mu.Unlock()
	if !ch.confirm {
		return nil
	}
	out, err = w.write(ctx, "seat.hold.confirm", http.MethodPost, fmt.Sprintf("%s/%d/confirm", holds, h.HoldID),
		map[string]string{"paymentReference": "pay-" + user})
	if err != nil {
		return err
	}
	switch err := out.Decode(&h); {
	case err == nil:
		b.mu.Lock()
		t.confirmed = true
		b.report.Confirmed++
		b.mu.Unlock()
	case client.IsCode(err, client.CodeHoldExpired):
		b.count(&b.report.ConfirmsRefused, 1)
	default:
		return fmt.Errorf("confirm for %s: %w", user, err)
	}
	return nil
}

// groupRush: the group rush against holdfast. Each write is submitted and
// its outcome awaited, as a person at a browser would.
type groupRush struct {
	book   *groupBook
	report *GroupReport // made by Check
}

func (s *groupRush) Setup(ctx context.Context, e *Env) (int, error) {
	s.book = newGroupBook(e.Opt.Seed, orDefault(e.Opt.Users, defaultGroupFans), orDefault(e.Opt.Seats, defaultGroupSeats),
		orDefault(e.Opt.SeatHoldSeconds, defaultHoldSeconds))
	return s.book.fans, s.book.setup(ctx, e, e.Admin)
}

func (s *groupRush) Journey(ctx context.Context, e *Env, i int) error {
	c, user, err := e.User(i)
	if err != nil {
		return err
	}
	return s.book.journey(ctx, queued{e, c}, i, user)
}

func (s *groupRush) Check(ctx context.Context, e *Env) ([]string, error) {
	out, r, err := s.book.checkTables(ctx, e.Opt.DatabaseURL, holdfastTables, e.Admin)
	s.report = r
	return out, err
}

func (s *groupRush) groupReport() *GroupReport { return s.report }

// baselineGroupRush: the same group rush against cmd/baseline's group
// mode: each write is one request answered with its outcome. Its event is
// written into the design's tables, and its checks read them with the same
// rules.
type baselineGroupRush struct{ groupRush }

func (s *baselineGroupRush) Setup(ctx context.Context, e *Env) (int, error) {
	s.book = newGroupBook(e.Opt.Seed, orDefault(e.Opt.Users, defaultGroupFans), orDefault(e.Opt.Seats, defaultGroupSeats),
		orDefault(e.Opt.SeatHoldSeconds, defaultHoldSeconds))
	err := inBaselineDB(ctx, e, func(db *pgxpool.Pool, schema string) (err error) {
		s.book.eventID, err = baseline.NewEvent(ctx, db, schema, "group rush "+e.RunID, groupMap(s.book.report.Seats),
			s.book.report.HoldSeconds, groupMaxSize)
		return err
	})
	if err == nil {
		err = warmUp(ctx, e)
	}
	return s.book.fans, err
}

func (s *baselineGroupRush) Journey(ctx context.Context, e *Env, i int) error {
	user := e.userID(i)
	return s.book.journey(ctx, syncWriter{e, user}, i, user)
}

func (s *baselineGroupRush) Check(ctx context.Context, e *Env) ([]string, error) {
	out, r, err := s.book.checkTables(ctx, e.Opt.DatabaseURL, baselineTables, nil)
	s.report = r
	return out, err
}
