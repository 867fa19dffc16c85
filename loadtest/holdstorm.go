package loadtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/bench/baseline"
	"github.com/holdfast/holdfast/client"
)

// The hold storm: users hold a random room type of a hotel (10 types of 10
// rooms) for one to three nights in the next two weeks; of the holds they
// get, half are confirmed, a quarter cancelled and a quarter abandoned to
// expire. hold-storm runs it against holdfast, baseline-hold-storm against
// cmd/baseline's hold mode (seed 000's locked flow done synchronously),
// with the same journeys: user i's choices depend only on the seed and i.

const (
	stormDays      = 14 // holds start within the next two weeks
	stormRoomTypes = 10
	stormRooms     = 10 // rooms of each type
)

// HoldReport is what a hold storm saw, for make bench's hold section.
type HoldReport struct {
	RoomTypes    int `json:"roomTypes"`
	RoomsPerType int `json:"roomsPerType"`
	Users        int `json:"users"`
	HoldsGranted int `json:"holdsGranted"`
	HoldsRefused int `json:"holdsRefused"` // NOT_AVAILABLE
	Confirmed    int `json:"confirmed"`
	// ConfirmsRefused counts confirms answered HOLD_EXPIRED or
	// NOT_AVAILABLE: none is expected within a hold's TTL.
	ConfirmsRefused int `json:"confirmsRefused"`
	Cancelled       int `json:"cancelled"`
	Abandoned       int `json:"abandoned"`
	// RoomNightsBooked sums the nights of the stays the clients were told
	// of; the API's reserved rooms must add up to it.
	RoomNightsBooked int `json:"roomNightsBooked"`
	// OversoldNights counts room type nights with more stays, or more stays
	// and live holds, than rooms; DoubleBooked, room nights told to two
	// stays.
	OversoldNights int `json:"oversoldNights"`
	DoubleBooked   int `json:"doubleBooked"`
	// HeldNightsTold is the nights of the holds the clients still hold
	// (abandoned, or confirm refused); HeldNightsSeen the API's held rooms
	// summed over the nights. Informative: they match when every hold the
	// clients were told of still counts, no more and no fewer.
	HeldNightsTold int `json:"heldNightsTold"`
	HeldNightsSeen int `json:"heldNightsSeen"`
}

// stormChoice is what user i of a hold storm does.
type stormChoice struct {
	roomType int // index into the fixture's room types
	start    int // days from today
	nights   int
	fate     int // for a granted hold: 0, 1 confirm; 2 cancel; 3 abandon
}

func stormChoiceOf(seed uint64, i int) stormChoice {
	rng := rand.New(rand.NewPCG(seed, uint64(i)))
	return stormChoice{roomType: rng.IntN(stormRoomTypes), start: 1 + rng.IntN(stormDays), nights: 1 + rng.IntN(3), fate: rng.IntN(4)}
}

// stormBook runs a hold storm's journeys and records what the clients were
// told, to check it against the API's availability.
type stormBook struct {
	staysFixture
	seed  uint64
	users int

	mu     sync.Mutex
	nights map[string]int    // "roomTypeId date" → confirmed stays
	booked map[string]string // "roomId date" → user
	held   map[string]int    // "roomTypeId date" → holds still held
	report HoldReport
	bad    violations
}

func newStormBook(seed uint64, users int) *stormBook {
	return &stormBook{seed: seed, users: users, nights: map[string]int{}, booked: map[string]string{}, held: map[string]int{},
		report: HoldReport{RoomTypes: stormRoomTypes, RoomsPerType: stormRooms, Users: users}}
}

func (b *stormBook) count(n *int) {
	b.mu.Lock()
	*n++
	b.mu.Unlock()
}

// journey is user i's: a hold, then its fate.
func (b *stormBook) journey(ctx context.Context, w writer, i int, user string) error {
	ch := stormChoiceOf(b.seed, i)
	out, err := w.write(ctx, "hold.create", http.MethodPost, "/api/v1/holds", map[string]any{"roomTypeId": b.roomTypes[ch.roomType],
		"checkIn": day(ch.start), "checkOut": day(ch.start + ch.nights), "clientHoldKey": uuid.NewString()})
	if err != nil {
		return err
	}
	var h client.Hold
	switch err := out.Decode(&h); {
	case client.IsCode(err, client.CodeNotAvailable):
		b.count(&b.report.HoldsRefused)
		return nil
	case err != nil:
		return fmt.Errorf("hold for %s: %w", user, err)
	}
	b.count(&b.report.HoldsGranted)
	switch {
	case ch.fate < 2:
		out, err := w.write(ctx, "hold.confirm", http.MethodPost, "/api/v1/holds/"+url.PathEscape(h.HoldID)+"/confirm", nil)
		if err != nil {
			return err
		}
		var res client.StayReservation
		switch err := out.Decode(&res); {
		case err == nil:
			b.confirmed(res)
		case client.IsCode(err, client.CodeNotAvailable), client.IsCode(err, client.CodeHoldExpired):
			b.count(&b.report.ConfirmsRefused)
			b.stillHeld(h)
		default:
			return fmt.Errorf("confirm for %s: %w", user, err)
		}
	case ch.fate < 3:
		out, err := w.write(ctx, "hold.cancel", http.MethodDelete, "/api/v1/holds/"+url.PathEscape(h.HoldID), nil)
		if err != nil {
			return err
		}
		if err := out.Err(); err != nil {
			return fmt.Errorf("cancel for %s: %w", user, err)
		}
		b.count(&b.report.Cancelled)
	default:
		b.count(&b.report.Abandoned)
		b.stillHeld(h)
	}
	return nil
}

// eachNight calls f with each night of [checkIn, checkOut).
func eachNight(checkIn, checkOut string, f func(date string)) error {
	from, err1 := time.Parse(time.DateOnly, checkIn)
	to, err2 := time.Parse(time.DateOnly, checkOut)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	for d := from; d.Before(to); d = d.AddDate(0, 0, 1) {
		f(d.Format(time.DateOnly))
	}
	return nil
}

func (b *stormBook) stillHeld(h client.Hold) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := eachNight(h.CheckIn, h.CheckOut, func(date string) {
		b.held[fmt.Sprintf("%d %s", h.RoomTypeID, date)]++
		b.report.HeldNightsTold++
	}); err != nil {
		b.bad.add("hold %s has dates %q..%q", h.HoldID, h.CheckIn, h.CheckOut)
	}
}

func (b *stormBook) confirmed(r client.StayReservation) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.report.Confirmed++
	if err := eachNight(r.CheckIn, r.CheckOut, func(date string) {
		b.nights[fmt.Sprintf("%d %s", r.RoomTypeID, date)]++
		b.report.RoomNightsBooked++
		room := fmt.Sprintf("%d %s", r.RoomID, date)
		if other, ok := b.booked[room]; ok {
			b.bad.add("room %d booked twice on %s (%s and %s)", r.RoomID, date, other, r.UserID)
			b.report.DoubleBooked++
		}
		b.booked[room] = r.UserID
	}); err != nil {
		b.bad.add("reservation %d has dates %q..%q", r.ReservationID, r.CheckIn, r.CheckOut)
	}
}

// check compares the confirmed stays the clients were told about with the
// API's availability: per room type and night, the reserved rooms equal the
// confirmations, and neither they nor they with the live holds exceed the
// rooms.
func (b *stormBook) check(items []client.Availability) ([]string, *HoldReport) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.report
	out := b.bad.all()
	for _, it := range items {
		want := b.nights[fmt.Sprintf("%d %s", it.RoomTypeID, it.Date)]
		r.HeldNightsSeen += it.HeldRooms
		if max(want, it.UnavailableRooms) > b.rooms || it.UnavailableRooms+it.HeldRooms > it.TotalRooms {
			r.OversoldNights++
			out = append(out, fmt.Sprintf("room type %d oversold on %s: %d stays told, %d reserved and %d held of %d rooms",
				it.RoomTypeID, it.Date, want, it.UnavailableRooms, it.HeldRooms, b.rooms))
		}
		if it.UnavailableRooms != want {
			out = append(out, fmt.Sprintf("room type %d on %s: API shows %d reserved, clients were told %d", it.RoomTypeID, it.Date, it.UnavailableRooms, want))
		}
		if it.AvailableRooms < 0 || it.AvailableRooms > it.TotalRooms {
			out = append(out, fmt.Sprintf("room type %d on %s: %d available of %d", it.RoomTypeID, it.Date, it.AvailableRooms, it.TotalRooms))
		}
	}
	return out, &r
}

// stormNights are the from and to of the nights a storm's check reads.
func stormNights() (string, string) { return day(1), day(stormDays + 4) }

// holdStorm: the hold storm against holdfast. Each write is submitted and
// its outcome awaited, as a person at a browser would.
type holdStorm struct {
	book   *stormBook
	report *HoldReport // made by Check
}

func (s *holdStorm) Setup(ctx context.Context, e *Env) (int, error) {
	s.book = newStormBook(e.Opt.Seed, orDefault(e.Opt.Users, 2000))
	return s.book.users, s.book.setup(ctx, e, e.Admin, stormRoomTypes, stormRooms)
}

func (s *holdStorm) Journey(ctx context.Context, e *Env, i int) error {
	c, user, err := e.User(i)
	if err != nil {
		return err
	}
	return s.book.journey(ctx, queued{e, c}, i, user)
}

func (s *holdStorm) Check(ctx context.Context, e *Env) ([]string, error) {
	from, to := stormNights()
	items, err := e.Admin.Availability(ctx, s.book.hotelID, from, to)
	if err != nil {
		return nil, err
	}
	out, r := s.book.check(items)
	s.report = r
	return out, nil
}

func (s *holdStorm) holdReport() *HoldReport { return s.report }

// baselineHoldStorm: the same hold storm against cmd/baseline's hold mode,
// seed 000's locked flow done synchronously: each write is one request
// answered with its outcome. Its hotel is written into the design's
// tables, and its check reads the same nights there.
type baselineHoldStorm struct{ holdStorm }

func (s *baselineHoldStorm) Setup(ctx context.Context, e *Env) (int, error) {
	s.book = newStormBook(e.Opt.Seed, orDefault(e.Opt.Users, 2000))
	s.book.rooms = stormRooms
	err := inBaselineDB(ctx, e, func(db *pgxpool.Pool, schema string) (err error) {
		s.book.hotelID, s.book.roomTypes, err = baseline.NewHotel(ctx, db, schema, stormRoomTypes, stormRooms)
		return err
	})
	if err == nil {
		err = warmUp(ctx, e)
	}
	return s.book.users, err
}

func (s *baselineHoldStorm) Journey(ctx context.Context, e *Env, i int) error {
	user := e.userID(i)
	return s.book.journey(ctx, syncWriter{e, user}, i, user)
}

func (s *baselineHoldStorm) Check(ctx context.Context, e *Env) (out []string, err error) {
	err = inBaselineDB(ctx, e, func(db *pgxpool.Pool, schema string) error {
		from, to := stormNights()
		items, err := baseline.Nights(ctx, db, schema, s.book.hotelID, from, to)
		out, s.report = s.book.check(items)
		return err
	})
	return out, err
}
