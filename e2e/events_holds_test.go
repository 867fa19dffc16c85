package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/internal/systest"
)

// A fan of an event with a seat map goes through the API as a page would:
// joins the line, takes its entry token, holds two seats side by side
// (best available), sees them held in the seat list and its holds,
// confirms them with a payment reference, and cannot release the order.
// Bad requests are refused at once with a 4xx, and nothing refused is
// stored.
func TestSeatHoldThroughTheAPI(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1})
	e := newEvent(t, s, map[string]any{"name": "Arena", "maxConcurrent": 5, "seatHoldSeconds": 300, "maxSeatsPerUser": 4,
		"sections": []map[string]any{
			{"name": "Floor", "priceTier": "A", "rows": []map[string]any{{"label": "1", "seats": 3}}},
			{"name": "Balcony", "priceTier": "B", "rows": []map[string]any{{"label": "1", "seats": 5}}},
		}})
	require.Equal(t, 8, e.TotalSeats)
	require.Equal(t, 4, e.MaxSeatsPerUser)
	fan := queueUsers(t, s, e.EventID, 1)[0]
	base := fmt.Sprintf("/api/v1/events/%d", e.EventID)
	var tok struct{ EntryToken string }
	r := fan.Do("POST", base+"/queue/token", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	r.JSON(t, &tok)
	entry := []string{events.EntryTokenHeader, tok.EntryToken}

	for _, bad := range []struct {
		body   any
		status int
		code   string
	}{
		{map[string]any{}, http.StatusBadRequest, domain.CodeInvalidInput},
		{map[string]any{"quantity": 0}, http.StatusBadRequest, domain.CodeInvalidInput},
		{map[string]any{"quantity": 5}, http.StatusBadRequest, domain.CodeInvalidInput},
		{map[string]any{"quantity": 1, "seatIds": []int{1}}, http.StatusBadRequest, domain.CodeInvalidInput},
		{map[string]any{"seatIds": []int{7, 7}}, http.StatusBadRequest, domain.CodeInvalidInput},
		{map[string]any{"quantity": 2, "section": "Roof"}, http.StatusNotFound, domain.CodeNotFound},
		{map[string]any{"seatIds": []int{1 << 40}}, http.StatusNotFound, domain.CodeNotFound},
	} {
		r := fan.Do("POST", base+"/holds", bad.body, entry...)
		require.Equal(t, bad.status, r.Status, "%v: %s", bad.body, r.Body)
		require.Equal(t, bad.code, r.ErrorCode(t))
	}
	r = fan.Do("POST", base+"/holds", map[string]any{"quantity": 2})
	require.Equal(t, http.StatusForbidden, r.Status, "no entry token")
	var stored int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM requests WHERE type = $1`, events.TypeSeatHold).Scan(&stored))
	require.Zero(t, stored, "nothing refused is stored")

	h := holdResult(t, fan, fan.Do("POST", base+"/holds", map[string]any{"quantity": 2, "section": "Balcony"}, entry...))
	require.Equal(t, "held", h.Status)
	var seats struct {
		Items    []events.Seat
		Sections []events.SectionInfo
	}
	fan.Do("GET", base+"/seats?status=held", nil).JSON(t, &seats)
	require.Len(t, seats.Items, 2)
	require.Equal(t, []string{"Balcony 1-1", "Balcony 1-2"}, []string{seats.Items[0].Label, seats.Items[1].Label})
	require.Equal(t, "B", seats.Items[0].PriceTier)
	require.Equal(t, []events.SectionInfo{{Name: "Floor", PriceTier: "A", Preference: 1}, {Name: "Balcony", PriceTier: "B", Preference: 2}}, seats.Sections)
	var list struct{ Items []events.HoldResult }
	fan.Do("GET", base+"/holds", nil).JSON(t, &list)
	require.Len(t, list.Items, 1)
	require.Equal(t, h.HoldID, list.Items[0].HoldID)

	hold := fmt.Sprintf("%s/holds/%d", base, h.HoldID)
	r = fan.Do("POST", hold+"/confirm", map[string]any{"paymentReference": ""})
	require.Equal(t, http.StatusBadRequest, r.Status)
	order := holdResult(t, fan, fan.Do("POST", hold+"/confirm", map[string]any{"paymentReference": "psp-123"}))
	require.Equal(t, "confirmed", order.Status)
	require.Equal(t, events.BookingReference("O", h.HoldID), *order.BookingReference)
	v := fan.Wait(accepted(t, fan.Do("DELETE", hold, nil)), 20*time.Second)
	require.Equal(t, domain.StatusRejected, v.Status)
	require.Equal(t, domain.CodeInvalidTransition, v.Error.Code)
	fan.Do("GET", base+"/seats?status=reserved", nil).JSON(t, &seats)
	require.Len(t, seats.Items, 2, "the order's seats are sold")
}

func accepted(t *testing.T, r systest.Response) string {
	t.Helper()
	require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
	var a systest.Accepted
	r.JSON(t, &a)
	return a.RequestID
}

// holdResult waits for an accepted hold write and returns its hold.
func holdResult(t *testing.T, c *systest.Client, r systest.Response) events.HoldResult {
	t.Helper()
	v := c.Wait(accepted(t, r), 20*time.Second)
	require.Equal(t, domain.StatusSucceeded, v.Status, "%+v", v.Error)
	var h events.HoldResult
	require.NoError(t, json.Unmarshal(v.Result, &h))
	return h
}
