package loadtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast/holdfast/client"
)

// staysFixture is a hotel with roomTypes room types of rooms rooms each.
type staysFixture struct {
	hotelID   int64
	roomTypes []int64
	rooms     int
}

func (f *staysFixture) setup(ctx context.Context, e *Env, roomTypes, rooms int) error {
	h, err := e.Admin.CreateHotel(ctx, "load hotel "+e.RunID, "Asia/Seoul", "KRW")
	if err != nil {
		return err
	}
	f.hotelID, f.rooms = h.HotelID, rooms
	for t := range roomTypes {
		rt, err := e.Admin.CreateRoomType(ctx, h.HotelID, fmt.Sprintf("type %d", t))
		if err != nil {
			return err
		}
		f.roomTypes = append(f.roomTypes, rt.RoomTypeID)
		for r := range rooms {
			if _, err := e.Admin.CreateRoom(ctx, h.HotelID, rt.RoomTypeID, fmt.Sprintf("%d%03d", t+1, r+1)); err != nil {
				return err
			}
		}
	}
	return nil
}

func day(offset int) string { return time.Now().UTC().AddDate(0, 0, offset).Format(time.DateOnly) }

// holdStorm: users hold a random room type for one to three nights in the
// next two weeks; of the holds they get, half are confirmed, a quarter
// cancelled and a quarter abandoned to expire.
type holdStorm struct {
	staysFixture
	users int

	mu     sync.Mutex
	nights map[string]int    // "roomTypeId date" → confirmed stays
	booked map[string]string // "roomId date" → user
	bad    violations
}

const stormDays = 14

func (s *holdStorm) Setup(ctx context.Context, e *Env) (int, error) {
	s.users = orDefault(e.Opt.Users, 2000)
	s.nights, s.booked = map[string]int{}, map[string]string{}
	return s.users, s.setup(ctx, e, 10, 10)
}

func (s *holdStorm) Journey(ctx context.Context, e *Env, i int) error {
	c, user, err := e.User(i)
	if err != nil {
		return err
	}
	rt := s.roomTypes[e.IntN(len(s.roomTypes))]
	start, nights := 1+e.IntN(stormDays), 1+e.IntN(3)
	out, err := e.Write(ctx, c, "hold.create", func(ctx context.Context) (client.Accepted, error) {
		return c.CreateHold(ctx, rt, day(start), day(start+nights), uuid.NewString())
	})
	if err != nil {
		return err
	}
	var h client.Hold
	switch err := out.Decode(&h); {
	case client.IsCode(err, "NOT_AVAILABLE"):
		return nil
	case err != nil:
		return fmt.Errorf("hold for %s: %w", user, err)
	}
	switch r := e.IntN(4); {
	case r < 2:
		out, err := e.Write(ctx, c, "hold.confirm", func(ctx context.Context) (client.Accepted, error) { return c.ConfirmHold(ctx, h.HoldID) })
		if err != nil {
			return err
		}
		var res client.StayReservation
		switch err := out.Decode(&res); {
		case err == nil:
			s.confirmed(res)
		case client.IsCode(err, "NOT_AVAILABLE"), client.IsCode(err, "HOLD_EXPIRED"):
		default:
			return fmt.Errorf("confirm for %s: %w", user, err)
		}
	case r < 3:
		out, err := e.Write(ctx, c, "hold.cancel", func(ctx context.Context) (client.Accepted, error) { return c.CancelHold(ctx, h.HoldID) })
		if err != nil {
			return err
		}
		if err := out.Err(); err != nil {
			return fmt.Errorf("cancel for %s: %w", user, err)
		}
	}
	return nil
}

func (s *holdStorm) confirmed(r client.StayReservation) {
	from, err1 := time.Parse(time.DateOnly, r.CheckIn)
	to, err2 := time.Parse(time.DateOnly, r.CheckOut)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err1 != nil || err2 != nil {
		s.bad.add("reservation %d has dates %q..%q", r.ReservationID, r.CheckIn, r.CheckOut)
		return
	}
	for d := from; d.Before(to); d = d.AddDate(0, 0, 1) {
		date := d.Format(time.DateOnly)
		s.nights[fmt.Sprintf("%d %s", r.RoomTypeID, date)]++
		room := fmt.Sprintf("%d %s", r.RoomID, date)
		if other, ok := s.booked[room]; ok {
			s.bad.add("room %d booked twice on %s (%s and %s)", r.RoomID, date, other, r.UserID)
		}
		s.booked[room] = r.UserID
	}
}

// Check compares the confirmed stays the clients were told about with the
// API's availability: per room type and night, the reserved rooms equal the
// confirmations, and never exceed the rooms.
func (s *holdStorm) Check(ctx context.Context, e *Env) ([]string, error) {
	items, err := e.Admin.Availability(ctx, s.hotelID, day(1), day(stormDays+4))
	if err != nil {
		return nil, err
	}
	out := s.bad.all()
	for _, it := range items {
		want := s.nights[fmt.Sprintf("%d %s", it.RoomTypeID, it.Date)]
		if want > s.rooms {
			out = append(out, fmt.Sprintf("room type %d oversold on %s: %d stays for %d rooms", it.RoomTypeID, it.Date, want, s.rooms))
		}
		if it.UnavailableRooms != want {
			out = append(out, fmt.Sprintf("room type %d on %s: API shows %d reserved, clients were told %d", it.RoomTypeID, it.Date, it.UnavailableRooms, want))
		}
		if it.AvailableRooms < 0 || it.AvailableRooms > it.TotalRooms {
			out = append(out, fmt.Sprintf("room type %d on %s: %d available of %d", it.RoomTypeID, it.Date, it.AvailableRooms, it.TotalRooms))
		}
	}
	return out, nil
}

// availabilityRead: staff read a 31-night aggregate availability of a hotel
// with 10 room types of 20 rooms, Users times.
type availabilityRead struct {
	staysFixture
	bad violations
}

func (s *availabilityRead) Setup(ctx context.Context, e *Env) (int, error) {
	return orDefault(e.Opt.Users, 5000), s.setup(ctx, e, 10, 20)
}

func (s *availabilityRead) Journey(ctx context.Context, e *Env, _ int) error {
	from := 1 + e.IntN(60)
	var items []client.Availability
	err := e.Read("availability", func() (err error) {
		items, err = e.Admin.Availability(ctx, s.hotelID, day(from), day(from+31))
		return err
	})
	if err != nil {
		return err
	}
	if len(items) != 31*len(s.roomTypes) {
		s.bad.add("availability answered %d items, want %d", len(items), 31*len(s.roomTypes))
	}
	for _, it := range items {
		if it.TotalRooms != s.rooms || it.AvailableRooms != it.TotalRooms-it.UnavailableRooms-it.HeldRooms {
			s.bad.add("inconsistent availability item %+v", it)
		}
	}
	return nil
}

func (s *availabilityRead) Check(context.Context, *Env) ([]string, error) { return s.bad.all(), nil }
