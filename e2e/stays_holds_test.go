package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/stays"
)

// holdFixture creates, through the API as staff, a hotel with one room type
// of n rooms and returns the room type's id.
func holdFixture(t *testing.T, s *systest.System, n int) int64 {
	t.Helper()
	staff := s.Client("staff", domain.RoleStaff)
	var hotel stays.Hotel
	r := staff.Do("POST", "/api/v1/hotels", map[string]string{"name": "Harbour", "timezone": "Asia/Seoul", "currency": "KRW"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	r.JSON(t, &hotel)
	var rt stays.RoomType
	r = staff.Do("POST", fmt.Sprintf("/api/v1/hotels/%d/room-types", hotel.HotelID), map[string]string{"name": "Deluxe"})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	r.JSON(t, &rt)
	for i := range n {
		r = staff.Do("POST", fmt.Sprintf("/api/v1/hotels/%d/rooms", hotel.HotelID),
			map[string]any{"roomTypeId": rt.RoomTypeID, "number": fmt.Sprintf("%d", 101+i)})
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	}
	return rt.RoomTypeID
}

// stayDates is a range starting a week from now.
func stayDates(nights int) (string, string) {
	in := time.Now().UTC().AddDate(0, 0, 7)
	return in.Format(domain.DateLayout), in.AddDate(0, 0, nights).Format(domain.DateLayout)
}

type holdClient struct {
	*systest.Client
	t *testing.T
}

func (h holdClient) create(rt int64, in, out, clientKey string) requests.View {
	h.t.Helper()
	return h.Wait(h.submitCreate(rt, in, out, clientKey), 30*time.Second)
}

// submitCreate sends a create and returns its request id, not waiting.
func (h holdClient) submitCreate(rt int64, in, out, clientKey string) string {
	h.t.Helper()
	r := h.Do("POST", "/api/v1/holds", stays.CreatePayload{RoomTypeID: rt, CheckIn: in, CheckOut: out, ClientHoldKey: clientKey})
	require.Equal(h.t, http.StatusAccepted, r.Status, "%s", r.Body)
	var a systest.Accepted
	r.JSON(h.t, &a)
	return a.RequestID
}

func (h holdClient) write(method, path string) requests.View {
	h.t.Helper()
	r := h.Do(method, path, nil)
	require.Equal(h.t, http.StatusAccepted, r.Status, "%s", r.Body)
	var a systest.Accepted
	r.JSON(h.t, &a)
	return h.Wait(a.RequestID, 30*time.Second)
}

func hold(t *testing.T, v requests.View) stays.Hold {
	t.Helper()
	require.Equal(t, domain.StatusSucceeded, v.Status, "error: %+v", v.Error)
	var h stays.Hold
	require.NoError(t, json.Unmarshal(v.Result, &h))
	return h
}

// heldCounts is the held rooms of room type rt on each night, as the
// availability read counts them.
func heldCounts(t *testing.T, s *systest.System, rt int64, in, out string) []int64 {
	t.Helper()
	dr, err := domain.ParseDateRange(in, out)
	require.NoError(t, err)
	ctx := context.Background()
	var hotelID int64
	require.NoError(t, s.Pool.QueryRow(ctx, `SELECT hotel_id FROM room_types WHERE id = $1`, rt).Scan(&hotelID))
	av, err := stays.NewAvailability(s.Pool, stays.NewHoldStore(s.Redis)).Hotel(ctx,
		stays.AvailabilityQuery{HotelID: hotelID, RoomTypeID: rt, Range: dr}, time.Now())
	require.NoError(t, err)
	counts := make([]int64, len(av.Items))
	for i, it := range av.Items {
		counts[i] = it.HeldRooms
	}
	return counts
}

// Seed 000 T1–T3 and T5–T6: create, reuse with TTL extension, key conflict,
// confirm and cancel, with the per-night counts after each step.
func TestHoldLifecycleT1toT6(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1, Overrides: []string{"HOLD_TTL", "1m"}})
	rt := holdFixture(t, s, 3)
	in, out := stayDates(2)
	alice := holdClient{s.Client("alice", domain.RoleUser), t}
	bob := holdClient{s.Client("bob", domain.RoleUser), t}
	k1, k2 := uuid.NewString(), uuid.NewString()

	// T1: a new clientHoldKey creates a hold; each night counts one more, TTL set.
	h1 := hold(t, alice.create(rt, in, out, k1))
	require.False(t, h1.Reused)
	require.Equal(t, "alice", h1.UserID)
	require.Equal(t, rt, h1.RoomTypeID)
	require.Equal(t, k1, h1.ClientHoldKey)
	require.WithinDuration(t, h1.CreatedAt.Add(time.Minute), h1.ExpiresAt, time.Second)
	require.Equal(t, []int64{1, 1}, heldCounts(t, s, rt, in, out))
	got := alice.Do("GET", "/api/v1/holds/"+h1.HoldID, nil)
	require.Equal(t, http.StatusOK, got.Status)

	// T2: the same range with another clientHoldKey returns the same hold,
	// counts unchanged, TTL extended.
	time.Sleep(20 * time.Millisecond)
	h2 := hold(t, alice.create(rt, in, out, k2))
	require.Equal(t, h1.HoldID, h2.HoldID)
	require.True(t, h2.Reused)
	require.True(t, h2.ExpiresAt.After(h1.ExpiresAt))
	require.Equal(t, []int64{1, 1}, heldCounts(t, s, rt, in, out))

	// T3: a clientHoldKey bound to another hold is a conflict.
	v := bob.create(rt, in, out, k1)
	require.Equal(t, domain.StatusRejected, v.Status)
	require.Equal(t, domain.CodeHoldKeyConflict, v.Error.Code)
	require.Equal(t, http.StatusConflict, v.Error.HTTPStatus)
	require.Equal(t, h1.HoldID, v.Error.Meta["holdId"])

	// Someone else's hold: not theirs to read, confirm or cancel.
	require.Equal(t, http.StatusForbidden, bob.Do("GET", "/api/v1/holds/"+h1.HoldID, nil).Status)
	v = bob.write("POST", "/api/v1/holds/"+h1.HoldID+"/confirm")
	require.Equal(t, domain.StatusRejected, v.Status)
	require.Equal(t, domain.CodeForbidden, v.Error.Code)
	require.Equal(t, http.StatusForbidden, v.Error.HTTPStatus)

	// T5: confirm assigns a room, the hold stops counting and disappears.
	v = alice.write("POST", "/api/v1/holds/"+h1.HoldID+"/confirm")
	require.Equal(t, domain.StatusSucceeded, v.Status, "%+v", v.Error)
	var res stays.Reservation
	require.NoError(t, json.Unmarshal(v.Result, &res))
	require.Equal(t, domain.StayConfirmed, res.Status)
	require.Positive(t, res.RoomID)
	require.Equal(t, in, res.CheckIn)
	require.Equal(t, out, res.CheckOut)
	require.Equal(t, []int64{0, 0}, heldCounts(t, s, rt, in, out))
	require.Equal(t, http.StatusNotFound, alice.Do("GET", "/api/v1/holds/"+h1.HoldID, nil).Status)
	// Confirming again answers with the same reservation.
	v = alice.write("POST", "/api/v1/holds/"+h1.HoldID+"/confirm")
	var again stays.Reservation
	require.NoError(t, json.Unmarshal(v.Result, &again))
	require.Equal(t, res.ReservationID, again.ReservationID)

	// T6: cancel drops the counts once; cancelling twice succeeds twice.
	hb := hold(t, bob.create(rt, in, out, uuid.NewString()))
	require.Equal(t, []int64{1, 1}, heldCounts(t, s, rt, in, out))
	for range 2 {
		v = bob.write("DELETE", "/api/v1/holds/"+hb.HoldID)
		require.Equal(t, domain.StatusSucceeded, v.Status)
		require.Equal(t, []int64{0, 0}, heldCounts(t, s, rt, in, out))
	}
	// A cancelled hold cannot be confirmed.
	v = bob.write("POST", "/api/v1/holds/"+hb.HoldID+"/confirm")
	require.Equal(t, domain.CodeHoldExpired, v.Error.Code)
	require.Equal(t, http.StatusGone, v.Error.HTTPStatus)
}

// T4: concurrent identical holds by one user give exactly one hold.
func TestHoldConcurrentSameUserT4(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 2})
	rt := holdFixture(t, s, 3)
	in, out := stayDates(3)
	alice := holdClient{s.Client("alice", domain.RoleUser), t}
	ids := make([]string, 20)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i] = hold(t, alice.create(rt, in, out, uuid.NewString())).HoldID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, ids[0], id)
	}
	require.Equal(t, []int64{1, 1, 1}, heldCounts(t, s, rt, in, out))
}

// holdRace queues holds by users for the same nights before any worker runs,
// starts workers, then confirms every hold granted; it returns the holds and
// the reservations.
func holdRace(t *testing.T, s *systest.System, rt int64, users, workers, waiters int) (holds, reservations int) {
	in, out := stayDates(2)
	clients := make([]holdClient, users)
	reqs := make([]string, users)
	var wg sync.WaitGroup
	for i := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clients[i] = holdClient{s.Client(fmt.Sprintf("racer%d", i), domain.RoleUser), t}
			r := clients[i].Do("POST", "/api/v1/holds", stays.CreatePayload{RoomTypeID: rt, CheckIn: in, CheckOut: out, ClientHoldKey: uuid.NewString()})
			require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
			var a systest.Accepted
			r.JSON(t, &a)
			reqs[i] = a.RequestID
		}()
	}
	wg.Wait()
	// Every batch reads the nights' counts before granting: hold the rooms
	// table so those reads wait, and let them all go at once.
	b := holdTable(t, s, "rooms")
	for i := range workers {
		s.StartWorker(fmt.Sprintf("w%d", i))
	}
	b.release(waiters)
	// Every holder confirms at once: the confirms race for the rooms too.
	var mu sync.Mutex
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := c.Wait(reqs[i], 60*time.Second)
			if v.Status == domain.StatusRejected {
				require.Equal(t, domain.CodeNotAvailable, v.Error.Code)
				return
			}
			h := hold(t, v)
			v = c.write("POST", "/api/v1/holds/"+h.HoldID+"/confirm")
			mu.Lock()
			defer mu.Unlock()
			holds++
			if v.Status == domain.StatusSucceeded {
				reservations++
			} else {
				require.Equal(t, domain.CodeNotAvailable, v.Error.Code, "%+v", v.Error)
			}
		}()
	}
	wg.Wait()
	return holds, reservations
}

// raceOverrides keep the hold races about rooms: small batches, and a lock
// wait long enough that a loaded machine does not turn a create into
// CONTENTION (HOLD_LOCK_WAIT has its own test).
var raceOverrides = []string{"BATCH_MAX", "8", "HOLD_LOCK_WAIT", "2m"}

// 200 users race for the last 5 rooms: exactly 5 holds, 5 reservations.
func TestHoldRaceForLastRooms(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Overrides: raceOverrides})
	rt := holdFixture(t, s, 5)
	holds, reservations := holdRace(t, s, rt, 200, 3, 1)
	require.Equal(t, 5, holds)
	require.Equal(t, 5, reservations)
	var booked int
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT count(*) FROM stay_reservations WHERE status = 'Confirmed'`).Scan(&booked))
	require.Equal(t, 5, booked)
}

// The control: without the room type's lease the same race hands out more
// holds than rooms; Postgres' re-check at confirm still keeps reservations
// within the rooms.
func TestHoldRaceControlWithoutGuardOversells(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Unguarded: true, Overrides: raceOverrides})
	rt := holdFixture(t, s, 5)
	holds, reservations := holdRace(t, s, rt, 200, 3, 6)
	t.Logf("unguarded: %d holds for 5 rooms, %d reservations", holds, reservations)
	require.Greater(t, holds, 5, "without the guard the race should oversell holds")
	require.Equal(t, 5, reservations)
}

// T7 and the exact-count deviation: a hold stops counting the instant it
// expires, although another hold on the same nights keeps being refreshed.
func TestHoldExpiryFreesAvailabilityAtOnce(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1, Overrides: []string{"HOLD_TTL", "2s"}})
	rt := holdFixture(t, s, 2)
	in, out := stayDates(1)
	alice := holdClient{s.Client("alice", domain.RoleUser), t}
	bob := holdClient{s.Client("bob", domain.RoleUser), t}
	carol := holdClient{s.Client("carol", domain.RoleUser), t}

	ha := hold(t, alice.create(rt, in, out, uuid.NewString()))
	hold(t, bob.create(rt, in, out, uuid.NewString()))
	require.Equal(t, domain.CodeNotAvailable, carol.create(rt, in, out, uuid.NewString()).Error.Code)

	// Bob keeps refreshing his hold (T2), so the night's key never lapses.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
				hold(t, bob.create(rt, in, out, uuid.NewString()))
			}
		}
	}()
	time.Sleep(time.Until(ha.ExpiresAt) + 50*time.Millisecond) // no longer than the TTL
	require.Equal(t, []int64{1}, heldCounts(t, s, rt, in, out), "alice's hold stopped counting at its expiry")
	hc := hold(t, carol.create(rt, in, out, uuid.NewString()))
	close(stop)
	<-done
	require.NotEmpty(t, hc.HoldID)
	v := alice.write("POST", "/api/v1/holds/"+ha.HoldID+"/confirm")
	require.Equal(t, domain.CodeHoldExpired, v.Error.Code)
	require.Equal(t, http.StatusGone, v.Error.HTTPStatus)
}

// T8: a create that cannot have its room type's lease in time is refused
// with CONTENTION; the next one succeeds.
func TestHoldContentionT8(t *testing.T) {
	t.Parallel()
	const lockWait = 3 * time.Second
	s := systest.Start(t, systest.Options{Workers: 1, Overrides: []string{"HOLD_LOCK_WAIT", lockWait.String()}})
	rt := holdFixture(t, s, 2)
	in, out := stayDates(1)
	// Someone else holds the room type's lease until alice's first create
	// has waited longer than HOLD_LOCK_WAIT.
	release := s.HoldLease(stays.SerialKey(rt), time.Minute)
	alice := holdClient{s.Client("alice", domain.RoleUser), t}
	id := alice.submitCreate(rt, in, out, uuid.NewString())
	// The worker measures the wait on its own clock from the request's
	// acceptance, so only real time makes it longer than lockWait.
	time.Sleep(lockWait + 100*time.Millisecond)
	release()
	v := alice.Wait(id, time.Minute)
	require.Equal(t, domain.StatusRejected, v.Status)
	require.Equal(t, domain.CodeContention, v.Error.Code)
	require.Equal(t, http.StatusConflict, v.Error.HTTPStatus)
	hold(t, alice.create(rt, in, out, uuid.NewString()))
}

// Bad hold input gets 4xx envelopes; wrong ids 404.
func TestHoldBadInput(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1})
	rt := holdFixture(t, s, 1)
	in, out := stayDates(2)
	c := s.Client("u", domain.RoleUser)
	past := time.Now().UTC().AddDate(0, 0, -3).Format(domain.DateLayout)
	far := time.Now().UTC().AddDate(0, 0, 60).Format(domain.DateLayout)
	cases := []struct {
		body   any
		status int
		code   string
	}{
		{stays.CreatePayload{RoomTypeID: rt, CheckIn: out, CheckOut: in, ClientHoldKey: uuid.NewString()}, 400, domain.CodeInvalidDateRange},
		{stays.CreatePayload{RoomTypeID: rt, CheckIn: in, CheckOut: far, ClientHoldKey: uuid.NewString()}, 400, domain.CodeDateRangeTooLong},
		{stays.CreatePayload{RoomTypeID: rt, CheckIn: past, CheckOut: in, ClientHoldKey: uuid.NewString()}, 400, domain.CodeInvalidDateRange},
		{stays.CreatePayload{RoomTypeID: rt, CheckIn: "2030-02-30", CheckOut: in, ClientHoldKey: uuid.NewString()}, 400, domain.CodeInvalidDateRange},
		{stays.CreatePayload{RoomTypeID: rt, CheckIn: in, CheckOut: out, ClientHoldKey: "not-a-uuid"}, 400, domain.CodeInvalidInput},
		{stays.CreatePayload{CheckIn: in, CheckOut: out, ClientHoldKey: uuid.NewString()}, 400, domain.CodeInvalidInput},
		{`{"roomTypeId": "7"}`, 400, domain.CodeInvalidInput},
		{`{"roomTypeId": 7, "qty": 2}`, 400, domain.CodeInvalidInput},
	}
	for _, tc := range cases {
		r := c.Do("POST", "/api/v1/holds", tc.body)
		require.Equal(t, tc.status, r.Status, "%v: %s", tc.body, r.Body)
		require.Equal(t, tc.code, r.ErrorCode(t), "%v", tc.body)
	}
	for _, path := range []string{"/api/v1/holds/nope", "/api/v1/holds/7-not-a-uuid", "/api/v1/holds/0-" + uuid.NewString()} {
		require.Equal(t, http.StatusNotFound, c.Do("GET", path, nil).Status, path)
		require.Equal(t, http.StatusNotFound, c.Do("POST", path+"/confirm", nil).Status, path)
		require.Equal(t, http.StatusNotFound, c.Do("DELETE", path, nil).Status, path)
	}
	// Unknown or inactive room types are rejected by the worker.
	hc := holdClient{c, t}
	v := hc.create(rt+1000, in, out, uuid.NewString())
	require.Equal(t, domain.CodeNotFound, v.Error.Code)
	staff := s.Client("staff", domain.RoleStaff)
	require.Equal(t, http.StatusOK, staff.Do("PATCH", fmt.Sprintf("/api/v1/room-types/%d", rt), map[string]string{"status": "Inactive"}).Status)
	v = hc.create(rt, in, out, uuid.NewString())
	require.Equal(t, domain.CodeRoomTypeInactive, v.Error.Code)
	require.Equal(t, http.StatusBadRequest, v.Error.HTTPStatus)
}
