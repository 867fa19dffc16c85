package loadtest

import (
	"context"
	"fmt"
	"time"

	"github.com/holdfast/holdfast/client"
)

// staysFixture is a hotel with roomTypes room types of rooms rooms each.
type staysFixture struct {
	hotelID   int64
	roomTypes []int64
	rooms     int
}

// setup creates the fixture through api: holdfast's admin calls, which the
// baseline's hold mode also answers.
func (f *staysFixture) setup(ctx context.Context, e *Env, api *client.Client, roomTypes, rooms int) error {
	h, err := api.CreateHotel(ctx, "load hotel "+e.RunID, "Asia/Seoul", "KRW")
	if err != nil {
		return err
	}
	f.hotelID, f.rooms = h.HotelID, rooms
	for t := range roomTypes {
		rt, err := api.CreateRoomType(ctx, h.HotelID, fmt.Sprintf("type %d", t))
		if err != nil {
			return err
		}
		f.roomTypes = append(f.roomTypes, rt.RoomTypeID)
		for r := range rooms {
			if _, err := api.CreateRoom(ctx, h.HotelID, rt.RoomTypeID, fmt.Sprintf("%d%03d", t+1, r+1)); err != nil {
				return err
			}
		}
	}
	return nil
}

func day(offset int) string { return time.Now().UTC().AddDate(0, 0, offset).Format(time.DateOnly) }

// availabilityRead: staff read a 31-night aggregate availability of a hotel
// with 10 room types of 20 rooms, Users times.
type availabilityRead struct {
	staysFixture
	bad violations
}

func (s *availabilityRead) Setup(ctx context.Context, e *Env) (int, error) {
	return orDefault(e.Opt.Users, 5000), s.setup(ctx, e, e.Admin, 10, 20)
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
