package baseline_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/bench/baseline"
	"github.com/holdfast/holdfast/client"
)

// holdAnswer is what a hold call answered: the status, and the error's
// code and meta when it is not 2xx.
type holdAnswer struct {
	status int
	body   []byte
	code   string
	meta   map[string]any
}

// call sends method path as user ("" for no X-User-Id) with body (nil for
// none).
func call(t *testing.T, sys system, method, path, user string, body any) holdAnswer {
	t.Helper()
	a, err := tryCall(sys, method, path, user, body)
	require.NoError(t, err)
	return a
}

// tryCall is call for goroutines other than the test's.
func tryCall(sys system, method, path, user string, body any) (holdAnswer, error) {
	var rd bytes.Buffer
	if body != nil {
		if err := json.NewEncoder(&rd).Encode(body); err != nil {
			return holdAnswer{}, err
		}
	}
	req, err := http.NewRequest(method, sys.url+path, &rd)
	if err != nil {
		return holdAnswer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if user != "" {
		req.Header.Set(baseline.UserHeader, user)
	}
	resp, err := sys.client.Do(req)
	if err != nil {
		return holdAnswer{}, err
	}
	defer resp.Body.Close()
	a := holdAnswer{status: resp.StatusCode}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return a, err
	}
	a.body = buf.Bytes()
	if a.status >= 300 {
		var e struct {
			Error struct {
				Code string         `json:"code"`
				Meta map[string]any `json:"meta"`
			} `json:"error"`
		}
		if err := json.Unmarshal(a.body, &e); err != nil {
			return a, fmt.Errorf("HTTP %d %s: %w", a.status, a.body, err)
		}
		a.code, a.meta = e.Error.Code, e.Error.Meta
	}
	return a, nil
}

func (a holdAnswer) decode(t *testing.T, v any) {
	t.Helper()
	require.Less(t, a.status, 300, "HTTP %d %s", a.status, a.body)
	require.NoError(t, json.Unmarshal(a.body, v))
}

// hotelFixture is a hotel with one room type of some rooms, on a system of
// the hold mode.
type hotelFixture struct {
	sys      system
	hotel    int64
	roomType int64
}

func newHotel(t *testing.T, rooms int) hotelFixture {
	t.Helper()
	f := hotelFixture{sys: start(t, baseline.Holds, 0)}
	hotel, types, err := baseline.NewHotel(context.Background(), f.sys.pool, f.sys.schema, 1, rooms)
	require.NoError(t, err)
	f.hotel, f.roomType = hotel, types[0]
	return f
}

func night(offset int) string { return time.Now().UTC().AddDate(0, 0, offset).Format(time.DateOnly) }

func (f hotelFixture) hold(t *testing.T, user string, from, to int, key string) holdAnswer {
	t.Helper()
	return call(t, f.sys, http.MethodPost, baseline.HoldsPath, user, f.holdBody(from, to, key))
}

func (f hotelFixture) holdBody(from, to int, key string) baseline.HoldRequest {
	return baseline.HoldRequest{RoomTypeID: f.roomType, CheckIn: night(from), CheckOut: night(to), ClientHoldKey: key}
}

func (f hotelFixture) confirm(t *testing.T, user, holdID string) holdAnswer {
	t.Helper()
	return call(t, f.sys, http.MethodPost, baseline.HoldsPath+"/"+holdID+"/confirm", user, nil)
}

func (f hotelFixture) cancel(t *testing.T, user, holdID string) holdAnswer {
	t.Helper()
	return call(t, f.sys, http.MethodDelete, baseline.HoldsPath+"/"+holdID, user, nil)
}

// nights reads the room type's availability of [from, to).
func (f hotelFixture) nights(t *testing.T, from, to int) []client.Availability {
	t.Helper()
	items, err := baseline.Nights(context.Background(), f.sys.pool, f.sys.schema, f.hotel, night(from), night(to))
	require.NoError(t, err)
	require.Len(t, items, to-from)
	for _, it := range items {
		require.Equal(t, f.roomType, it.RoomTypeID)
	}
	return items
}

// counts are a night's reserved and held rooms.
type counts struct{ reserved, held int }

func (f hotelFixture) counts(t *testing.T, from, to int) []counts {
	t.Helper()
	var out []counts
	for _, it := range f.nights(t, from, to) {
		out = append(out, counts{it.UnavailableRooms, it.HeldRooms})
	}
	return out
}

func (f hotelFixture) expire(t *testing.T, holdID string) {
	t.Helper()
	_, err := f.sys.pool.Exec(context.Background(), "UPDATE "+f.sys.schema+".holds SET expires_at = now() - interval '1 millisecond' WHERE id = $1", holdID)
	require.NoError(t, err)
}

// Many users race for the last rooms of a room type on overlapping stays:
// no night gets more holds than rooms, a night asked for far beyond them
// gets exactly the rooms, every refusal is NOT_AVAILABLE naming a night of
// its stay that was full; the availability read counts what was granted.
func TestHoldRaceGrantsExactlyTheRooms(t *testing.T) {
	t.Parallel()
	const rooms, users = 3, 60
	f := newHotel(t, rooms)
	stays := make([][2]int, users)
	for i := range stays {
		stays[i] = [2]int{1 + i%3, 2 + i%3 + (i/3)%2} // one or two nights within nights 1–4
	}
	answers := make([]holdAnswer, users)
	errs := make([]error, users)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range users {
		wg.Go(func() {
			<-gate
			answers[i], errs[i] = tryCall(f.sys, http.MethodPost, baseline.HoldsPath, fmt.Sprintf("user-%02d", i), f.holdBody(stays[i][0], stays[i][1], uuid.NewString()))
		})
	}
	close(gate)
	wg.Wait()

	held := make([]int, 5)
	for i, a := range answers {
		require.NoError(t, errs[i])
		if a.status == http.StatusConflict {
			require.Equal(t, "NOT_AVAILABLE", a.code)
			continue
		}
		require.Equal(t, http.StatusCreated, a.status, string(a.body))
		var h baseline.Hold
		a.decode(t, &h)
		require.False(t, h.Reused)
		for n := stays[i][0]; n < stays[i][1]; n++ {
			held[n]++
		}
	}
	for i, a := range answers {
		if a.status != http.StatusConflict {
			continue
		}
		full := false
		for n := stays[i][0]; n < stays[i][1]; n++ {
			full = full || (night(n) == a.meta["date"] && held[n] == rooms)
		}
		require.True(t, full, "user %d refused for %v, a night of its stay %v that was not full (%v)", i, a.meta["date"], stays[i], held)
	}
	require.Equal(t, rooms, held[1], "night 1 full")
	for n, c := range f.counts(t, 1, 5) {
		require.LessOrEqual(t, held[n+1], rooms, "night %d oversold", n+1)
		require.Equal(t, counts{0, held[n+1]}, c, "night %d: the holds granted", n+1)
	}
}

// A repeat of a hold returns the user's live hold on the range with its TTL
// extended, whatever its clientHoldKey (reused, counts unchanged: seed 000
// T2); a clientHoldKey bound to another user's hold is HOLD_KEY_CONFLICT
// (T3); the same key on another range is another hold.
func TestHoldRepeatsAreIdempotent(t *testing.T) {
	t.Parallel()
	f := newHotel(t, 5)
	key := uuid.NewString()
	first := f.hold(t, "ann", 2, 4, key)
	require.Equal(t, http.StatusCreated, first.status, string(first.body))
	var h baseline.Hold
	first.decode(t, &h)
	require.Equal(t, baseline.Hold{HoldID: h.HoldID, RoomTypeID: f.roomType, CheckIn: night(2), CheckOut: night(4), UserID: "ann",
		ClientHoldKey: key, CreatedAt: h.CreatedAt, ExpiresAt: h.CreatedAt.Add(baseline.DefaultHoldTTL)}, h)

	for _, k := range []string{key, uuid.NewString()} {
		again := f.hold(t, "ann", 2, 4, k)
		require.Equal(t, http.StatusOK, again.status, string(again.body))
		var r baseline.Hold
		again.decode(t, &r)
		require.True(t, r.Reused)
		require.Equal(t, h.HoldID, r.HoldID)
		require.Equal(t, k, r.ClientHoldKey)
		require.Equal(t, h.CreatedAt, r.CreatedAt)
		require.True(t, r.ExpiresAt.After(h.ExpiresAt), "the TTL is extended")
		h = r
	}
	require.Equal(t, []counts{{0, 1}, {0, 1}}, f.counts(t, 2, 4), "one hold, counted once")

	conflict := f.hold(t, "bob", 2, 4, key)
	require.Equal(t, http.StatusConflict, conflict.status)
	require.Equal(t, "HOLD_KEY_CONFLICT", conflict.code)
	require.Equal(t, h.HoldID, conflict.meta["holdId"])
	other := f.hold(t, "ann", 3, 5, key)
	require.Equal(t, http.StatusCreated, other.status, "the key on another range")
	require.Equal(t, []counts{{0, 1}, {0, 2}, {0, 1}}, f.counts(t, 2, 5))

	f.expire(t, h.HoldID)
	again := f.hold(t, "bob", 2, 4, key)
	require.Equal(t, http.StatusCreated, again.status, "a key bound to an expired hold is free: %s", again.body)
}

// A hold stops counting the instant it expires, with no sweeper: the room
// it held is available to the next user at once (seed 000 T7, SPEC §4.2's
// exact counts), and confirming it is HOLD_EXPIRED, 410.
func TestHoldExpiryFreesTheRoomAtOnce(t *testing.T) {
	t.Parallel()
	f := newHotel(t, 1)
	var h baseline.Hold
	f.hold(t, "ann", 1, 3, uuid.NewString()).decode(t, &h)
	full := f.hold(t, "bob", 2, 3, uuid.NewString())
	require.Equal(t, http.StatusConflict, full.status)
	require.Equal(t, "NOT_AVAILABLE", full.code)
	require.Equal(t, night(2), full.meta["date"])

	f.expire(t, h.HoldID)
	require.Equal(t, []counts{{0, 0}, {0, 0}}, f.counts(t, 1, 3), "an expired hold counts for nothing")
	var b baseline.Hold
	got := f.hold(t, "bob", 2, 3, uuid.NewString())
	require.Equal(t, http.StatusCreated, got.status, string(got.body))
	got.decode(t, &b)

	late := f.confirm(t, "ann", h.HoldID)
	require.Equal(t, http.StatusGone, late.status)
	require.Equal(t, "HOLD_EXPIRED", late.code)
	unknown := f.confirm(t, "ann", uuid.NewString())
	require.Equal(t, "HOLD_EXPIRED", unknown.code, "a hold that never existed")
	require.Equal(t, []counts{{0, 0}, {0, 1}}, f.counts(t, 1, 3))

	var st baseline.Stay
	f.confirm(t, "bob", b.HoldID).decode(t, &st)
	require.Equal(t, []counts{{0, 0}, {1, 0}}, f.counts(t, 1, 3))
	f.expire(t, b.HoldID)
	again := f.confirm(t, "bob", b.HoldID)
	require.Equal(t, http.StatusOK, again.status, "confirmed before it expired: the same stay")
	var st2 baseline.Stay
	again.decode(t, &st2)
	require.Equal(t, st, st2)
}

// Confirm assigns a concrete room and creates the stay; another user's hold
// is FORBIDDEN; confirming twice gives the same stay; rooms are assigned so
// that none is booked twice on a night.
func TestHoldConfirmAssignsARoom(t *testing.T) {
	t.Parallel()
	f := newHotel(t, 2)
	var a, b baseline.Hold
	f.hold(t, "ann", 1, 3, uuid.NewString()).decode(t, &a)
	f.hold(t, "bob", 2, 4, uuid.NewString()).decode(t, &b)
	forbidden := f.confirm(t, "bob", a.HoldID)
	require.Equal(t, http.StatusForbidden, forbidden.status)
	require.Equal(t, "FORBIDDEN", forbidden.code)

	var sa, sb baseline.Stay
	f.confirm(t, "ann", a.HoldID).decode(t, &sa)
	require.Equal(t, baseline.Stay{ReservationID: sa.ReservationID, HotelID: f.hotel, RoomTypeID: f.roomType, RoomID: sa.RoomID, UserID: "ann",
		HoldID: a.HoldID, CheckIn: night(1), CheckOut: night(3), Status: "Confirmed", CreatedAt: sa.CreatedAt}, sa)
	f.confirm(t, "bob", b.HoldID).decode(t, &sb)
	require.NotEqual(t, sa.RoomID, sb.RoomID, "the stays share night 2")
	var again baseline.Stay
	f.confirm(t, "ann", a.HoldID).decode(t, &again)
	require.Equal(t, sa, again)
	require.Equal(t, http.StatusForbidden, f.confirm(t, "bob", a.HoldID).status)
	require.Equal(t, []counts{{1, 0}, {2, 0}, {1, 0}}, f.counts(t, 1, 4))

	var stays int
	require.NoError(t, f.sys.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+f.sys.schema+".stays").Scan(&stays))
	require.Equal(t, 2, stays)
}

// Cancelling is idempotent: twice succeeds twice and the counts drop once
// (seed 000 T6); a cancelled hold cannot be confirmed; another user's live
// hold is FORBIDDEN.
func TestHoldCancelTwice(t *testing.T) {
	t.Parallel()
	f := newHotel(t, 2)
	var a, b baseline.Hold
	f.hold(t, "ann", 1, 2, uuid.NewString()).decode(t, &a)
	f.hold(t, "bob", 1, 2, uuid.NewString()).decode(t, &b)
	require.Equal(t, []counts{{0, 2}}, f.counts(t, 1, 2))

	forbidden := f.cancel(t, "bob", a.HoldID)
	require.Equal(t, http.StatusForbidden, forbidden.status)
	require.Equal(t, "FORBIDDEN", forbidden.code)
	for range 2 {
		got := f.cancel(t, "ann", a.HoldID)
		require.Equal(t, http.StatusOK, got.status, string(got.body))
		require.JSONEq(t, fmt.Sprintf(`{"holdId": %q, "cancelled": true}`, a.HoldID), string(got.body))
		require.Equal(t, []counts{{0, 1}}, f.counts(t, 1, 2), "dropped once")
	}
	require.Equal(t, http.StatusOK, f.cancel(t, "bob", a.HoldID).status, "nothing left to guard")
	gone := f.confirm(t, "ann", a.HoldID)
	require.Equal(t, "HOLD_EXPIRED", gone.code)

	var st baseline.Stay
	f.confirm(t, "bob", b.HoldID).decode(t, &st)
	require.Equal(t, http.StatusOK, f.cancel(t, "bob", b.HoldID).status, "a confirmed hold has nothing left to release")
	require.Equal(t, []counts{{1, 0}}, f.counts(t, 1, 2), "the stay stays")
}

// Malformed calls are refused with holdfast's codes and change nothing.
func TestHoldBadRequests(t *testing.T) {
	t.Parallel()
	f := newHotel(t, 1)
	for _, tc := range []struct {
		name, user string
		body       any
		status     int
		code       string
	}{
		{"no caller", "", f.holdBody(1, 2, uuid.NewString()), http.StatusBadRequest, "INVALID_INPUT"},
		{"not a UUID", "ann", f.holdBody(1, 2, "click-1"), http.StatusBadRequest, "INVALID_INPUT"},
		{"no room type", "ann", baseline.HoldRequest{CheckIn: night(1), CheckOut: night(2), ClientHoldKey: uuid.NewString()}, http.StatusBadRequest, "INVALID_INPUT"},
		{"check-out first", "ann", f.holdBody(2, 1, uuid.NewString()), http.StatusBadRequest, "INVALID_DATE_RANGE"},
		{"in the past", "ann", f.holdBody(-5, -3, uuid.NewString()), http.StatusBadRequest, "INVALID_DATE_RANGE"},
		{"too long", "ann", f.holdBody(1, 40, uuid.NewString()), http.StatusBadRequest, "DATE_RANGE_TOO_LONG"},
		{"unknown room type", "ann", baseline.HoldRequest{RoomTypeID: 1 << 40, CheckIn: night(1), CheckOut: night(2), ClientHoldKey: uuid.NewString()}, http.StatusNotFound, "NOT_FOUND"},
		{"malformed", "ann", "{", http.StatusBadRequest, "INVALID_INPUT"},
	} {
		got := call(t, f.sys, http.MethodPost, baseline.HoldsPath, tc.user, tc.body)
		require.Equal(t, tc.status, got.status, "%s: %s", tc.name, got.body)
		require.Equal(t, tc.code, got.code, tc.name)
	}
	require.Equal(t, []counts{{0, 0}}, f.counts(t, 1, 2))
	require.Equal(t, "INVALID_INPUT", call(t, f.sys, http.MethodPost, baseline.HoldsPath+"/x/confirm", "", nil).code)
}
