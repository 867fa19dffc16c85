package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/stays"
)

// availFixture is a hotel built through the API, with stays inserted
// straight into Postgres. Nights are day offsets from d(0), a month ahead
// (holds refuse past dates):
//
//	Deluxe (Active)  A1 Clean        Confirmed [0,2)
//	                 A2 Clean        CheckedIn [1,3), Confirmed [3,4) (one ends as the next begins)
//	                 A3 Clean        Cancelled [0,4): never counts
//	                 A4 OutOfService Confirmed [0,1): not counted at all
//	                 A5 Dirty        Confirmed [2,3)
//	Suite  (Active)  B1 Clean        Confirmed [-1,1) and [4,6) (straddle [0,5)); a live hold on [2,3)
//	                 B2 Inactive
//	Closed (Inactive) C1
//	Empty  (Active)  no rooms
type availFixture struct {
	s                            *systest.System
	staff                        *systest.Client
	hotel, inactiveHotel         int64
	deluxe, suite, closed, empty int64
	foreignType                  int64 // a room type of another hotel
	inactiveHotelType            int64 // an active room type of the inactive hotel
	rooms                        map[string]int64
	base                         time.Time
}

func (f *availFixture) d(i int) string { return f.base.AddDate(0, 0, i).Format(domain.DateLayout) }

func availCreate(t *testing.T, c *systest.Client, path string, body any, idField string) int64 {
	t.Helper()
	r := c.Do("POST", path, body)
	require.Equal(t, http.StatusCreated, r.Status, "%s: %s", path, r.Body)
	var m map[string]any
	r.JSON(t, &m)
	id, ok := m[idField].(float64)
	require.True(t, ok, "no %s in %s", idField, r.Body)
	return int64(id)
}

func availPatch(t *testing.T, c *systest.Client, path string, body any) {
	t.Helper()
	r := c.Do("PATCH", path, body)
	require.Equal(t, http.StatusOK, r.Status, "%s: %s", path, r.Body)
}

func newAvailFixture(t *testing.T, s *systest.System) *availFixture {
	t.Helper()
	f := &availFixture{s: s, staff: s.Client("staff", domain.RoleStaff), rooms: map[string]int64{},
		base: time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, 30)}
	hotel := func(name string) int64 {
		return availCreate(t, f.staff, "/api/v1/hotels",
			map[string]string{"name": name, "timezone": "Asia/Seoul", "currency": "KRW"}, "hotelId")
	}
	roomType := func(hotel int64, name string) int64 {
		return availCreate(t, f.staff, fmt.Sprintf("/api/v1/hotels/%d/room-types", hotel), map[string]string{"name": name}, "roomTypeId")
	}
	f.hotel = hotel("Grand")
	f.deluxe, f.suite = roomType(f.hotel, "Deluxe"), roomType(f.hotel, "Suite")
	f.closed, f.empty = roomType(f.hotel, "Closed"), roomType(f.hotel, "Empty")
	for _, r := range []struct {
		number string
		rt     int64
	}{{"A1", f.deluxe}, {"A2", f.deluxe}, {"A3", f.deluxe}, {"A4", f.deluxe}, {"A5", f.deluxe},
		{"B1", f.suite}, {"B2", f.suite}, {"C1", f.closed}} {
		f.rooms[r.number] = availCreate(t, f.staff, fmt.Sprintf("/api/v1/hotels/%d/rooms", f.hotel),
			map[string]any{"roomTypeId": r.rt, "number": r.number}, "roomId")
	}
	availPatch(t, f.staff, fmt.Sprintf("/api/v1/rooms/%d", f.rooms["A4"]), map[string]string{"status": domain.StatusOutOfService})
	availPatch(t, f.staff, fmt.Sprintf("/api/v1/rooms/%d", f.rooms["A5"]), map[string]string{"housekeepingStatus": domain.HousekeepingDirty})
	availPatch(t, f.staff, fmt.Sprintf("/api/v1/rooms/%d", f.rooms["B2"]), map[string]string{"status": domain.StatusInactive})
	availPatch(t, f.staff, fmt.Sprintf("/api/v1/room-types/%d", f.closed), map[string]string{"status": domain.StatusInactive})

	stays := []struct {
		room, status string
		in, out      int
	}{
		{"A1", domain.StayConfirmed, 0, 2}, {"A2", domain.StayCheckedIn, 1, 3}, {"A2", domain.StayConfirmed, 3, 4},
		{"A3", domain.StayCancelled, 0, 4}, {"A4", domain.StayConfirmed, 0, 1}, {"A5", domain.StayConfirmed, 2, 3},
		{"B1", domain.StayConfirmed, -1, 1}, {"B1", domain.StayConfirmed, 4, 6},
	}
	for i, st := range stays {
		_, err := s.Pool.Exec(t.Context(), `INSERT INTO stay_reservations
				(hotel_id, room_type_id, room_id, user_id, check_in, check_out, status)
			SELECT hotel_id, room_type_id, id, $2, $3, $4, $5 FROM rooms WHERE id = $1`,
			f.rooms[st.room], "guest-"+strconv.Itoa(i), f.d(st.in), f.d(st.out), st.status)
		require.NoError(t, err)
	}

	other := hotel("Elsewhere")
	f.foreignType = roomType(other, "Deluxe")
	f.inactiveHotel = hotel("Shut")
	f.inactiveHotelType = roomType(f.inactiveHotel, "Deluxe")
	availPatch(t, f.staff, fmt.Sprintf("/api/v1/hotels/%d", f.inactiveHotel), map[string]string{"status": domain.StatusInactive})
	return f
}

// availGet asserts the status and decodes a 200 body into out.
func availGet(t *testing.T, c *systest.Client, path string, status int, out any) systest.Response {
	t.Helper()
	r := c.Do("GET", path, nil)
	require.Equal(t, status, r.Status, "GET %s: %s", path, r.Body)
	if out != nil {
		r.JSON(t, out)
	}
	return r
}

// availRow is one room type's series over the nights of a range.
type availRow struct{ total, unavailable, held, available []int64 }

// availSeries regroups aggregate items by room type, checking they come by
// date, then room type, over exactly the range's nights.
func availSeries(t *testing.T, f *availFixture, got stays.HotelAvailability, from, to int, types ...int64) map[int64]availRow {
	t.Helper()
	require.Equal(t, f.hotel, got.HotelID)
	require.Equal(t, "KRW", got.Currency)
	require.Len(t, got.Items, (to-from)*len(types), "items: %+v", got.Items)
	out := map[int64]availRow{}
	for i, it := range got.Items {
		require.Equal(t, f.d(from+i/len(types)), it.Date)
		require.Equal(t, types[i%len(types)], it.RoomTypeID)
		r := out[it.RoomTypeID]
		r.total = append(r.total, it.TotalRooms)
		r.unavailable = append(r.unavailable, it.UnavailableRooms)
		r.held = append(r.held, it.HeldRooms)
		r.available = append(r.available, it.AvailableRooms)
		out[it.RoomTypeID] = r
	}
	return out
}

func TestAvailabilityAggregate(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1})
	f := newAvailFixture(t, s)
	staff := f.staff

	// A live hold on Suite for night 2, through the real write path.
	guest := s.Client("guest", domain.RoleUser)
	r := guest.Do("POST", "/api/v1/holds", stays.CreatePayload{RoomTypeID: f.suite, CheckIn: f.d(2), CheckOut: f.d(3),
		ClientHoldKey: uuid.NewString()})
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	var a systest.Accepted
	r.JSON(t, &a)
	v := guest.Wait(a.RequestID, 30*time.Second)
	require.Equal(t, domain.StatusSucceeded, v.Status, "hold: %+v", v.Error)

	path := func(from, to int, extra string) string {
		return fmt.Sprintf("/api/v1/hotels/%d/availability?from=%s&to=%s%s", f.hotel, f.d(from), f.d(to), extra)
	}
	t.Run("numbers", func(t *testing.T) {
		var got stays.HotelAvailability
		availGet(t, staff, path(0, 5, ""), http.StatusOK, &got)
		rows := availSeries(t, f, got, 0, 5, f.deluxe, f.suite, f.empty) // Closed is left out
		require.Equal(t, "Deluxe", got.Items[0].RoomTypeName)
		require.Equal(t, availRow{
			total:       []int64{4, 4, 4, 4, 4}, // A1, A2, A3, A5: A4 is out of service
			unavailable: []int64{1, 2, 2, 1, 0}, // the Cancelled stay on A3 and A4's stay never count
			held:        []int64{0, 0, 0, 0, 0},
			available:   []int64{3, 2, 2, 3, 4},
		}, rows[f.deluxe])
		require.Equal(t, availRow{
			total:       []int64{1, 1, 1, 1, 1}, // B2 is inactive
			unavailable: []int64{1, 0, 0, 0, 1},
			held:        []int64{0, 0, 1, 0, 0},
			available:   []int64{0, 1, 0, 1, 0},
		}, rows[f.suite])
		require.Equal(t, availRow{
			total: []int64{0, 0, 0, 0, 0}, unavailable: []int64{0, 0, 0, 0, 0},
			held: []int64{0, 0, 0, 0, 0}, available: []int64{0, 0, 0, 0, 0},
		}, rows[f.empty])
	})
	t.Run("excludeDirty", func(t *testing.T) {
		var got stays.HotelAvailability
		availGet(t, staff, path(0, 5, "&excludeDirty=true"), http.StatusOK, &got)
		rows := availSeries(t, f, got, 0, 5, f.deluxe, f.suite, f.empty)
		// Dirty A5 is unavailable every night, counted once on night 2 when it also has a stay.
		require.Equal(t, []int64{2, 3, 2, 2, 1}, rows[f.deluxe].unavailable)
		require.Equal(t, []int64{2, 1, 2, 2, 3}, rows[f.deluxe].available)
		require.Equal(t, []int64{1, 0, 0, 0, 1}, rows[f.suite].unavailable)

		availGet(t, staff, path(0, 5, "&excludeDirty=false"), http.StatusOK, &got)
		require.Equal(t, []int64{1, 2, 2, 1, 0}, availSeries(t, f, got, 0, 5, f.deluxe, f.suite, f.empty)[f.deluxe].unavailable)
	})
	t.Run("boundaries", func(t *testing.T) {
		var got stays.HotelAvailability
		availGet(t, staff, path(5, 7, "&roomTypeId="+strconv.FormatInt(f.suite, 10)), http.StatusOK, &got)
		// B1's [4,6) covers night 5; its check-out night 6 is free.
		require.Equal(t, []int64{1, 0}, availSeries(t, f, got, 5, 7, f.suite)[f.suite].unavailable)
		availGet(t, staff, path(-1, 0, ""), http.StatusOK, &got)
		rows := availSeries(t, f, got, -1, 0, f.deluxe, f.suite, f.empty)
		require.Equal(t, []int64{1}, rows[f.suite].unavailable) // [-1,1) starts before the range's first night
		require.Equal(t, []int64{0}, rows[f.deluxe].unavailable)
		// A1's [0,2) ends before night 2; A2's CheckedIn [1,3) and Confirmed
		// [3,4) are back to back; A5's [2,3) is a single night.
		availGet(t, staff, path(2, 4, "&roomTypeId="+strconv.FormatInt(f.deluxe, 10)), http.StatusOK, &got)
		require.Equal(t, []int64{2, 1}, availSeries(t, f, got, 2, 4, f.deluxe)[f.deluxe].unavailable)
		availGet(t, staff, path(4, 5, "&roomTypeId="+strconv.FormatInt(f.deluxe, 10)), http.StatusOK, &got)
		require.Equal(t, []int64{0}, availSeries(t, f, got, 4, 5, f.deluxe)[f.deluxe].unavailable)
		// 31 nights is the longest range.
		availGet(t, staff, path(0, domain.MaxNights, ""), http.StatusOK, &got)
		require.Len(t, got.Items, domain.MaxNights*3)
	})
	t.Run("admin", func(t *testing.T) {
		var got stays.HotelAvailability
		availGet(t, s.Client("root", domain.RoleAdmin), path(0, 5, ""), http.StatusOK, &got)
		require.Len(t, got.Items, 15)
	})
	t.Run("rooms", func(t *testing.T) {
		type roomsBody struct {
			HotelID int64                    `json:"hotelId"`
			Items   []stays.RoomAvailability `json:"items"`
		}
		rooms := func(extra string) map[string]stays.RoomAvailability {
			t.Helper()
			var got roomsBody
			availGet(t, staff, fmt.Sprintf("/api/v1/hotels/%d/availability/rooms?from=%s&to=%s%s", f.hotel, f.d(0), f.d(5), extra),
				http.StatusOK, &got)
			require.Equal(t, f.hotel, got.HotelID)
			out := map[string]stays.RoomAvailability{}
			for _, it := range got.Items {
				require.Equal(t, f.rooms[it.Number], it.RoomID)
				out[it.Number] = it
			}
			return out
		}
		d := func(nights ...int) []string {
			out := []string{}
			for _, n := range nights {
				out = append(out, f.d(n))
			}
			return out
		}
		got := rooms("")
		require.Len(t, got, 5, "Active rooms of active types: %v", got) // A1 A2 A3 A5 B1
		require.Equal(t, stays.RoomAvailability{RoomID: f.rooms["A1"], Number: "A1", RoomTypeID: f.deluxe,
			Status: domain.StatusActive, HousekeepingStatus: domain.HousekeepingClean,
			ReservedDates: d(0, 1), AvailableDates: d(2, 3, 4)}, got["A1"])
		require.Equal(t, d(1, 2, 3), got["A2"].ReservedDates)
		require.Equal(t, d(0, 4), got["A2"].AvailableDates)
		require.Equal(t, d(), got["A3"].ReservedDates, "a Cancelled stay reserves nothing")
		require.Equal(t, d(0, 1, 2, 3, 4), got["A3"].AvailableDates)
		require.Equal(t, domain.HousekeepingDirty, got["A5"].HousekeepingStatus)
		require.Equal(t, d(2), got["A5"].ReservedDates)
		require.Equal(t, d(0, 1, 3, 4), got["A5"].AvailableDates)
		require.Equal(t, d(0, 4), got["B1"].ReservedDates)

		got = rooms("&excludeDirty=true")
		require.Equal(t, d(2), got["A5"].ReservedDates)
		require.Equal(t, d(), got["A5"].AvailableDates)
		require.Equal(t, d(2, 3, 4), got["A1"].AvailableDates)

		got = rooms("&status=OutOfService")
		require.Len(t, got, 1)
		require.Equal(t, d(0), got["A4"].ReservedDates)
		require.Equal(t, d(), got["A4"].AvailableDates)
		got = rooms("&status=Inactive")
		require.Len(t, got, 1)
		require.Equal(t, d(), got["B2"].AvailableDates)
		got = rooms("&status=Active&roomTypeId=" + strconv.FormatInt(f.suite, 10))
		require.Len(t, got, 1)
		require.Contains(t, got, "B1")
		require.Len(t, rooms("&roomTypeId="+strconv.FormatInt(f.empty, 10)), 0)
	})
	t.Run("check", func(t *testing.T) {
		check := func(rt int64, from, to int, extra string) map[string]any {
			t.Helper()
			var got map[string]any
			availGet(t, staff, fmt.Sprintf("/api/v1/hotels/%d/availability/check?roomTypeId=%d&from=%s&to=%s%s",
				f.hotel, rt, f.d(from), f.d(to), extra), http.StatusOK, &got)
			return got
		}
		require.Equal(t, map[string]any{"roomTypeId": float64(f.deluxe), "from": f.d(0), "to": f.d(5),
			"availableCount": float64(2), "isAvailable": true}, check(f.deluxe, 0, 5, ""), "no reason when available")
		require.Equal(t, float64(1), check(f.deluxe, 0, 5, "&excludeDirty=true")["availableCount"])
		require.Equal(t, map[string]any{"roomTypeId": float64(f.suite), "from": f.d(0), "to": f.d(5),
			"availableCount": float64(0), "isAvailable": false, "reason": stays.ReasonNoRoomsLeft}, check(f.suite, 0, 5, ""))
		require.Equal(t, false, check(f.suite, 2, 3, "")["isAvailable"], "the live hold takes the last room")
		require.Equal(t, true, check(f.suite, 1, 2, "")["isAvailable"])
		got := check(f.empty, 0, 1, "")
		require.Equal(t, false, got["isAvailable"])
		require.Equal(t, stays.ReasonNoActiveRooms, got["reason"])
	})
	t.Run("public", func(t *testing.T) {
		anon := s.Client("anon", domain.RoleUser)
		anon.Token = ""
		var public, staffView stays.HotelAvailability
		q := fmt.Sprintf("hotels/%d/availability?from=%s&to=%s", f.hotel, f.d(0), f.d(5))
		availGet(t, anon, "/api/v1/public/"+q, http.StatusOK, &public)
		availGet(t, staff, "/api/v1/"+q, http.StatusOK, &staffView)
		require.Equal(t, staffView, public)
		r := availGet(t, anon, "/api/v1/public/hotels/999999/availability?from="+f.d(0)+"&to="+f.d(1), http.StatusNotFound, nil)
		require.Equal(t, domain.CodeNotFound, r.ErrorCode(t))
		r = availGet(t, anon, fmt.Sprintf("/api/v1/public/hotels/%d/availability?from=%s&to=%s", f.inactiveHotel, f.d(0), f.d(1)),
			http.StatusBadRequest, nil)
		require.Equal(t, domain.CodeHotelInactive, r.ErrorCode(t))
		// The staff routes stay closed to anonymous callers.
		r = availGet(t, anon, "/api/v1/"+q, http.StatusUnauthorized, nil)
		require.Equal(t, domain.CodeUnauthenticated, r.ErrorCode(t))
	})
}

func TestAvailabilityErrors(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{})
	f := newAvailFixture(t, s)
	hotelPath := func(hotel any, endpoint string) string {
		return fmt.Sprintf("/api/v1/hotels/%v/availability%s", hotel, endpoint)
	}
	ok := "from=" + f.d(0) + "&to=" + f.d(2)
	id := func(n int64) string { return strconv.FormatInt(n, 10) }
	endpoints := []string{"", "/rooms", "/check"}
	// The check endpoint needs a room type (of the hotel asked about, unless
	// the case is about the room type); the others take it as a filter.
	withType := func(endpoint string, hotel any, query string) string {
		if endpoint != "/check" || strings.Contains(query, "roomTypeId=") {
			return query
		}
		if hotel == f.inactiveHotel {
			return query + "&roomTypeId=" + id(f.inactiveHotelType)
		}
		return query + "&roomTypeId=" + id(f.deluxe)
	}
	cases := []struct {
		name   string
		hotel  any
		query  string
		status int
		code   string
	}{
		{"no dates", f.hotel, "", 400, domain.CodeInvalidDateRange},
		{"no to", f.hotel, "from=" + f.d(0), 400, domain.CodeInvalidDateRange},
		{"from equals to", f.hotel, "from=" + f.d(1) + "&to=" + f.d(1), 400, domain.CodeInvalidDateRange},
		{"from after to", f.hotel, "from=" + f.d(2) + "&to=" + f.d(1), 400, domain.CodeInvalidDateRange},
		{"not a date", f.hotel, "from=2025-13-01&to=2026-01-01", 400, domain.CodeInvalidDateRange},
		{"not a day", f.hotel, "from=2025-02-29&to=2025-03-02", 400, domain.CodeInvalidDateRange},
		{"timestamp", f.hotel, "from=2025-01-01T00:00:00Z&to=2025-01-02", 400, domain.CodeInvalidDateRange},
		{"32 nights", f.hotel, "from=" + f.d(0) + "&to=" + f.d(32), 400, domain.CodeDateRangeTooLong},
		{"excludeDirty yes", f.hotel, ok + "&excludeDirty=yes", 400, domain.CodeInvalidFilter},
		{"excludeDirty TRUE", f.hotel, ok + "&excludeDirty=TRUE", 400, domain.CodeInvalidFilter},
		{"excludeDirty empty", f.hotel, ok + "&excludeDirty=", 400, domain.CodeInvalidFilter},
		{"roomTypeId word", f.hotel, ok + "&roomTypeId=deluxe", 400, domain.CodeInvalidFilter},
		{"roomTypeId zero", f.hotel, ok + "&roomTypeId=0", 400, domain.CodeInvalidFilter},
		{"roomTypeId negative", f.hotel, ok + "&roomTypeId=-3", 400, domain.CodeInvalidFilter},
		{"roomTypeId empty", f.hotel, ok + "&roomTypeId=", 400, domain.CodeInvalidFilter},
		{"roomTypeId too big", f.hotel, ok + "&roomTypeId=99999999999999999999", 400, domain.CodeInvalidFilter},
		{"roomTypeId inactive", f.hotel, ok + "&roomTypeId=" + id(f.closed), 400, domain.CodeRoomTypeInactive},
		{"roomTypeId unknown", f.hotel, ok + "&roomTypeId=999999", 404, domain.CodeNotFound},
		{"roomTypeId of another hotel", f.hotel, ok + "&roomTypeId=" + id(f.foreignType), 404, domain.CodeNotFound},
		{"hotel unknown", 999999, ok, 404, domain.CodeNotFound},
		{"hotel zero", 0, ok, 404, domain.CodeNotFound},
		{"hotel word", "grand", ok, 404, domain.CodeNotFound},
		{"hotel inactive", f.inactiveHotel, ok, 400, domain.CodeHotelInactive},
	}
	staff := f.staff
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, ep := range endpoints {
				q := withType(ep, tc.hotel, tc.query)
				r := staff.Do("GET", hotelPath(tc.hotel, ep)+"?"+q, nil)
				require.Equal(t, tc.status, r.Status, "%s %s: %s", ep, q, r.Body)
				require.Equal(t, tc.code, r.ErrorCode(t), "%s %s", ep, q)
			}
		})
	}
	t.Run("dates are checked before the filters and the hotel", func(t *testing.T) {
		t.Parallel()
		r := staff.Do("GET", hotelPath(999999, "?from=x&to=y&excludeDirty=maybe"), nil)
		require.Equal(t, http.StatusBadRequest, r.Status)
		require.Equal(t, domain.CodeInvalidDateRange, r.ErrorCode(t))
	})
	t.Run("rooms status filter", func(t *testing.T) {
		t.Parallel()
		for _, st := range []string{"Broken", "active", "", "Dirty"} {
			r := staff.Do("GET", hotelPath(f.hotel, "/rooms?"+ok+"&status="+url.QueryEscape(st)), nil)
			require.Equal(t, http.StatusBadRequest, r.Status, "status %q: %s", st, r.Body)
			require.Equal(t, domain.CodeInvalidFilter, r.ErrorCode(t))
		}
	})
	t.Run("check needs a room type", func(t *testing.T) {
		t.Parallel()
		r := staff.Do("GET", hotelPath(f.hotel, "/check?"+ok), nil)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s", r.Body)
		require.Equal(t, domain.CodeInvalidFilter, r.ErrorCode(t))
	})
	t.Run("roles", func(t *testing.T) {
		t.Parallel()
		user := s.Client("someone", domain.RoleUser)
		anon := s.Client("anon", domain.RoleUser)
		anon.Token = ""
		for _, ep := range endpoints {
			p := hotelPath(f.hotel, ep) + "?" + withType(ep, f.hotel, ok)
			r := user.Do("GET", p, nil)
			require.Equal(t, http.StatusForbidden, r.Status, "%s: %s", p, r.Body)
			require.Equal(t, domain.CodeForbidden, r.ErrorCode(t))
			r = anon.Do("GET", p, nil)
			require.Equal(t, http.StatusUnauthorized, r.Status, "%s: %s", p, r.Body)
			require.Equal(t, domain.CodeUnauthenticated, r.ErrorCode(t))
			require.Equal(t, http.StatusOK, staff.Do("GET", p, nil).Status)
		}
	})
	t.Run("never a 5xx", func(t *testing.T) {
		t.Parallel()
		queries := []string{"from=%00&to=%ff", "from[]=1", "from=" + f.d(0) + "&from=" + f.d(9) + "&to=" + f.d(1),
			"from=0001-01-01&to=0001-01-02", "from=9999-12-30&to=9999-12-31", "from=-2025-01-01&to=2025-01-02",
			"roomTypeId=9223372036854775807&" + ok, "roomTypeId=1e3&" + ok, "excludeDirty=1&" + ok,
			"status=%27;DROP%20TABLE%20rooms;--&" + ok, "from=" + url.QueryEscape("2025-01-01 ") + "&to=2025-01-02"}
		for _, hotel := range []string{id(f.hotel), "9223372036854775807", "-1", "1e3", "%20"} {
			for _, ep := range endpoints {
				for _, q := range queries {
					r := staff.Do("GET", hotelPath(hotel, ep)+"?"+q, nil)
					require.Less(t, r.Status, 500, "%s?%s: %s", hotelPath(hotel, ep), q, r.Body)
					if r.Status != http.StatusOK {
						r.ErrorCode(t)
					}
				}
			}
		}
	})
}

func TestAvailabilityPublicRateLimited(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Overrides: []string{"RATE_LIMIT_PER_IP", "2"}})
	staff := s.Client("staff", domain.RoleStaff)
	hotel := availCreate(t, staff, "/api/v1/hotels", map[string]string{"name": "Tiny", "timezone": "UTC", "currency": "EUR"}, "hotelId")
	from := time.Now().UTC().AddDate(0, 0, 1).Format(domain.DateLayout)
	to := time.Now().UTC().AddDate(0, 0, 3).Format(domain.DateLayout)
	path := fmt.Sprintf("/hotels/%d/availability?from=%s&to=%s", hotel, from, to)
	anon := s.Client("anon", domain.RoleUser)
	anon.Token = ""

	// A burst of one second's worth passes, then the limit answers 429.
	for range 2 {
		var got stays.HotelAvailability
		availGet(t, anon, "/api/v1/public"+path, http.StatusOK, &got)
		require.Equal(t, "EUR", got.Currency)
		require.Empty(t, got.Items)
	}
	limited := 0
	for range 10 {
		r := anon.Do("GET", "/api/v1/public"+path, nil)
		if r.Status == http.StatusOK {
			continue
		}
		limited++
		require.Equal(t, http.StatusTooManyRequests, r.Status, "%s", r.Body)
		require.Equal(t, domain.CodeRateLimited, r.ErrorCode(t))
		ra, err := strconv.Atoi(r.Header.Get("Retry-After"))
		require.NoError(t, err, "Retry-After %q", r.Header.Get("Retry-After"))
		require.GreaterOrEqual(t, ra, 1)
	}
	require.Positive(t, limited, "10 requests at once over a limit of 2/s")
	// The limit is per IP, on the public routes only: staff reads go on.
	availGet(t, staff, "/api/v1"+path, http.StatusOK, nil)
	// And it refills.
	require.Eventually(t, func() bool {
		return anon.Do("GET", "/api/v1/public"+path, nil).Status == http.StatusOK
	}, 10*time.Second, 100*time.Millisecond)
}
