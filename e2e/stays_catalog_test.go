package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/stays"
)

func TestCatalogValidationAndRoles(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{})
	staff, user := s.Client("staff", domain.RoleStaff), s.Client("u", domain.RoleUser)
	anon := s.Client("x", domain.RoleUser)
	anon.Token = ""

	good := map[string]string{"name": "Harbour", "timezone": "Asia/Seoul", "currency": "KRW"}
	require.Equal(t, http.StatusForbidden, user.Do("POST", "/api/v1/hotels", good).Status)
	require.Equal(t, http.StatusUnauthorized, anon.Do("POST", "/api/v1/hotels", good).Status)
	for _, bad := range []map[string]string{
		{"name": "", "timezone": "Asia/Seoul", "currency": "KRW"},
		{"name": "H", "timezone": "Mars/Olympus", "currency": "KRW"},
		{"name": "H", "timezone": "Asia/Seoul", "currency": "krw"},
		{"name": "H", "timezone": "", "currency": "KRW"},
	} {
		r := staff.Do("POST", "/api/v1/hotels", bad)
		require.Equal(t, http.StatusBadRequest, r.Status, "%v", bad)
		require.Equal(t, domain.CodeInvalidInput, r.ErrorCode(t))
	}
	var hotel stays.Hotel
	r := staff.Do("POST", "/api/v1/hotels", good)
	require.Equal(t, http.StatusCreated, r.Status)
	r.JSON(t, &hotel)
	require.Equal(t, domain.StatusActive, hotel.Status)

	require.Equal(t, http.StatusNotFound, staff.Do("POST", "/api/v1/hotels/999999/room-types", map[string]string{"name": "A"}).Status)
	require.Equal(t, http.StatusNotFound, staff.Do("POST", "/api/v1/hotels/abc/room-types", map[string]string{"name": "A"}).Status)
	var rt stays.RoomType
	r = staff.Do("POST", fmt.Sprintf("/api/v1/hotels/%d/room-types", hotel.HotelID), map[string]string{"name": "Twin"})
	require.Equal(t, http.StatusCreated, r.Status)
	r.JSON(t, &rt)
	r = staff.Do("POST", fmt.Sprintf("/api/v1/hotels/%d/room-types", hotel.HotelID), map[string]string{"name": "Twin"})
	require.Equal(t, http.StatusConflict, r.Status)
	require.Equal(t, domain.CodeConflict, r.ErrorCode(t))

	rooms := fmt.Sprintf("/api/v1/hotels/%d/rooms", hotel.HotelID)
	r = staff.Do("POST", rooms, map[string]any{"roomTypeId": rt.RoomTypeID, "number": "101"})
	require.Equal(t, http.StatusCreated, r.Status)
	var room stays.Room
	r.JSON(t, &room)
	require.Equal(t, domain.HousekeepingClean, room.HousekeepingStatus)
	require.Equal(t, http.StatusConflict, staff.Do("POST", rooms, map[string]any{"roomTypeId": rt.RoomTypeID, "number": "101"}).Status)
	require.Equal(t, http.StatusBadRequest, staff.Do("POST", rooms, map[string]any{"number": "102"}).Status)
	require.Equal(t, http.StatusNotFound, staff.Do("POST", rooms, map[string]any{"roomTypeId": rt.RoomTypeID + 999, "number": "102"}).Status)

	roomURL := fmt.Sprintf("/api/v1/rooms/%d", room.RoomID)
	require.Equal(t, http.StatusBadRequest, staff.Do("PATCH", roomURL, map[string]string{"status": "Closed"}).Status)
	require.Equal(t, http.StatusBadRequest, staff.Do("PATCH", roomURL, map[string]string{"housekeepingStatus": "Messy"}).Status)
	require.Equal(t, http.StatusBadRequest, staff.Do("PATCH", roomURL, map[string]string{}).Status)
	require.Equal(t, http.StatusNotFound, staff.Do("PATCH", "/api/v1/rooms/999999", map[string]string{"status": "Active"}).Status)
	r = staff.Do("PATCH", roomURL, map[string]string{"status": "OutOfService", "housekeepingStatus": "Dirty"})
	require.Equal(t, http.StatusOK, r.Status)
	r.JSON(t, &room)
	require.Equal(t, domain.StatusOutOfService, room.Status)
	require.Equal(t, domain.HousekeepingDirty, room.HousekeepingStatus)
	require.Equal(t, http.StatusBadRequest, staff.Do("PATCH", fmt.Sprintf("/api/v1/room-types/%d", rt.RoomTypeID), map[string]string{"status": "Gone"}).Status)
	require.Equal(t, http.StatusBadRequest, staff.Do("PATCH", fmt.Sprintf("/api/v1/hotels/%d", hotel.HotelID), map[string]string{"status": "Closed"}).Status)
}

// Staff move reservations through their states; check-out makes the room
// Dirty; other moves are refused. An inactive hotel takes no holds.
func TestReservationStaffActions(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1})
	rt := holdFixture(t, s, 2)
	staff := s.Client("staff", domain.RoleStaff)
	alice := holdClient{s.Client("alice", domain.RoleUser), t}

	book := func(nights int) stays.Reservation {
		in, out := stayDates(nights)
		h := hold(t, alice.create(rt, in, out, uuid.NewString()))
		v := alice.write("POST", "/api/v1/holds/"+h.HoldID+"/confirm")
		require.Equal(t, domain.StatusSucceeded, v.Status, "%+v", v.Error)
		var res stays.Reservation
		require.NoError(t, json.Unmarshal(v.Result, &res))
		return res
	}
	first, second := book(2), book(3)
	require.NotEqual(t, first.RoomID, second.RoomID, "overlapping stays get different rooms")

	act := func(id int64, action string) systest.Response {
		return staff.Do("POST", fmt.Sprintf("/api/v1/reservations/%d/%s", id, action), nil)
	}
	require.Equal(t, http.StatusForbidden, alice.Do("POST", fmt.Sprintf("/api/v1/reservations/%d/check-in", first.ReservationID), nil).Status)
	r := act(first.ReservationID, "check-out")
	require.Equal(t, http.StatusConflict, r.Status)
	require.Equal(t, domain.CodeInvalidTransition, r.ErrorCode(t))
	require.Equal(t, http.StatusOK, act(first.ReservationID, "check-in").Status)
	r = act(first.ReservationID, "check-out")
	require.Equal(t, http.StatusOK, r.Status)
	var out stays.Reservation
	r.JSON(t, &out)
	require.Equal(t, domain.StayCheckedOut, out.Status)
	var hk string
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT housekeeping_status FROM rooms WHERE id = $1`, first.RoomID).Scan(&hk))
	require.Equal(t, domain.HousekeepingDirty, hk, "check-out makes the room Dirty")
	require.Equal(t, http.StatusConflict, act(first.ReservationID, "cancel").Status)
	require.Equal(t, http.StatusOK, act(second.ReservationID, "cancel").Status)
	require.Equal(t, http.StatusNotFound, act(999999, "cancel").Status)

	var list struct{ Items []stays.Reservation }
	r = staff.Do("GET", fmt.Sprintf("/api/v1/hotels/%d/reservations?status=Cancelled", first.HotelID), nil)
	require.Equal(t, http.StatusOK, r.Status)
	r.JSON(t, &list)
	require.Len(t, list.Items, 1)
	require.Equal(t, second.ReservationID, list.Items[0].ReservationID)
	r = staff.Do("GET", fmt.Sprintf("/api/v1/hotels/%d/reservations?status=Lost", first.HotelID), nil)
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, domain.CodeInvalidFilter, r.ErrorCode(t))
	require.Equal(t, http.StatusNotFound, staff.Do("GET", "/api/v1/hotels/999999/reservations", nil).Status)

	require.Equal(t, http.StatusOK, staff.Do("PATCH", fmt.Sprintf("/api/v1/hotels/%d", first.HotelID), map[string]string{"status": "Inactive"}).Status)
	in, out2 := stayDates(1)
	v := alice.create(rt, in, out2, uuid.NewString())
	require.Equal(t, domain.CodeHotelInactive, v.Error.Code)
	require.Equal(t, http.StatusBadRequest, v.Error.HTTPStatus)
}
