package baseline_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/bench/baseline"
	"github.com/holdfast/holdfast/client"
	"github.com/holdfast/holdfast/domain"
)

// cartAnswer is what a reserve answered: the reservations on 200, the
// error's code and option otherwise.
type cartAnswer struct {
	status int
	lines  []baseline.CartReservation
	code   string
	option int64
}

type cartError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Meta    struct {
			ProductOptionID int64 `json:"productOptionId"`
		} `json:"meta"`
	} `json:"error"`
}

// postJSON posts body (raw when a string) as user ("" for no X-User-Id)
// and returns the status and body.
func postJSON(sys system, path, user string, body any) (int, []byte, error) {
	raw, ok := body.(string)
	if !ok {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		raw = string(b)
	}
	req, err := http.NewRequest(http.MethodPost, sys.url+path, strings.NewReader(raw))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if user != "" {
		req.Header.Set(baseline.UserHeader, user)
	}
	resp, err := sys.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes(), err
}

// reserveCart posts a reserve of items as user.
func reserveCart(sys system, user string, items ...baseline.CartItem) (cartAnswer, error) {
	status, body, err := postJSON(sys, baseline.CartReservePath, user, baseline.CartRequest{UserID: user, Items: items})
	if err != nil {
		return cartAnswer{}, err
	}
	return decodeCartAnswer(status, body)
}

func decodeCartAnswer(status int, body []byte) (cartAnswer, error) {
	a := cartAnswer{status: status}
	if status == http.StatusOK {
		var r baseline.CartReply
		err := json.Unmarshal(body, &r)
		a.lines = r.Reservations
		return a, err
	}
	var e cartError
	if err := json.Unmarshal(body, &e); err != nil {
		return a, fmt.Errorf("HTTP %d %s: %w", status, body, err)
	}
	a.code, a.option = e.Error.Code, e.Error.Meta.ProductOptionID
	return a, nil
}

func mustReserve(t *testing.T, sys system, user string, items ...baseline.CartItem) cartAnswer {
	t.Helper()
	a, err := reserveCart(sys, user, items...)
	require.NoError(t, err)
	return a
}

func line(option int64, quantity int) baseline.CartItem {
	return baseline.CartItem{ProductOptionID: option, Quantity: quantity}
}

// createOptions makes options of the given stocks (negative: inactive,
// with its absolute value), a product each, and returns their ids.
func createOptions(t *testing.T, sys system, stocks ...int) []int64 {
	t.Helper()
	var ids []int64
	for _, st := range stocks {
		id, err := baseline.NewOptions(context.Background(), sys.pool, sys.schema, "coffee", max(st, -st), randomName())
		require.NoError(t, err)
		_, err = sys.pool.Exec(context.Background(), "UPDATE "+sys.schema+".product_options SET is_active = $2 WHERE id = $1", id[0], st >= 0)
		require.NoError(t, err)
		ids = append(ids, id...)
	}
	return ids
}

func stockOf(t *testing.T, sys system, option int64) client.Stock {
	t.Helper()
	st, err := baseline.Stocks(context.Background(), sys.pool, sys.schema, []int64{option})
	require.NoError(t, err)
	return st[option]
}

// liveUsers reads the live reservation rows of each user on options.
func liveUsers(t *testing.T, sys system, options ...int64) map[string]int {
	t.Helper()
	live, err := baseline.LiveRows(context.Background(), sys.pool, sys.schema, options)
	require.NoError(t, err)
	return live
}

// A cart is reserved whole, in the seed's shape, or not at all: a line that
// does not fit refuses the cart with that line's option named and reserves
// none of the others; an inactive or unknown option refuses it too.
func TestCartReservesAllOrNothing(t *testing.T) {
	t.Parallel()
	sys := start(t, baseline.Cart, 0)
	ids := createOptions(t, sys, 5, 1, -3)
	a, b, inactive := ids[0], ids[1], ids[2]

	got := mustReserve(t, sys, "u1", line(b, 1), line(a, 2)) // any order; reserved in id order
	require.Equal(t, http.StatusOK, got.status)
	require.Len(t, got.lines, 2)
	first, second := got.lines[0], got.lines[1]
	require.Equal(t, a, first.ProductOptionID)
	require.Equal(t, 2, first.Quantity)
	require.Equal(t, 3, first.AvailableStock)
	require.Equal(t, b, second.ProductOptionID)
	require.Equal(t, 0, second.AvailableStock)
	for _, l := range got.lines {
		require.Equal(t, "RESERVED", l.Status)
		require.Positive(t, l.ReservationID)
		require.NotEmpty(t, l.OptionCode)
		require.Equal(t, "coffee", l.ProductName)
		require.Equal(t, baseline.CartTTL, l.ExpiresAt.Sub(l.ReservedAt))
		require.WithinDuration(t, time.Now(), l.ReservedAt, time.Minute)
	}

	for _, tc := range []struct {
		name   string
		user   string
		items  []baseline.CartItem
		status int
		code   string
		option int64
	}{
		{"a line that does not fit", "u2", []baseline.CartItem{line(a, 1), line(b, 1)}, http.StatusConflict, domain.CodeInsufficientStock, b},
		{"more than is left", "u3", []baseline.CartItem{line(a, 4)}, http.StatusConflict, domain.CodeInsufficientStock, a},
		{"an inactive option", "u4", []baseline.CartItem{line(a, 1), line(inactive, 1)}, http.StatusBadRequest, domain.CodeOptionInactive, inactive},
		{"an unknown option", "u5", []baseline.CartItem{line(a, 1), line(1<<40, 1)}, http.StatusBadRequest, domain.CodeOptionInactive, 1 << 40},
		{"an empty cart", "u6", nil, http.StatusBadRequest, domain.CodeCartEmpty, 0},
	} {
		got := mustReserve(t, sys, tc.user, tc.items...)
		require.Equal(t, tc.status, got.status, tc.name)
		require.Equal(t, tc.code, got.code, tc.name)
		require.Equal(t, tc.option, got.option, tc.name)
	}
	require.Equal(t, client.Stock{ProductOptionID: a, StockQuantity: 5, ReservedQuantity: 2, AvailableStock: 3}, stockOf(t, sys, a))
	require.Equal(t, client.Stock{ProductOptionID: b, StockQuantity: 1, ReservedQuantity: 1, AvailableStock: 0}, stockOf(t, sys, b))
	require.Equal(t, map[string]int{"u1": 2}, liveUsers(t, sys, a, b, inactive), "no refused cart left a row")

	got = mustReserve(t, sys, "u3", line(a, 3))
	require.Equal(t, http.StatusOK, got.status, "the last 3 of a")
	require.Zero(t, stockOf(t, sys, a).AvailableStock)
}

// A user holding a live reservation is refused another, also when many of
// its reserves race (the user's advisory lock; the seed's COUNT alone lets
// two through, which TestCartLocksPreventOversellAndDuplicates forces);
// once it lapses, it counts neither as a duplicate nor against the stock.
func TestCartRefusesASecondLiveReservation(t *testing.T) {
	t.Parallel()
	sys := start(t, baseline.Cart, 0)
	ids := createOptions(t, sys, 10, 10, 10, 10, 10, 10, 10, 10)

	require.Equal(t, http.StatusOK, mustReserve(t, sys, "ann", line(ids[0], 1)).status)
	again := mustReserve(t, sys, "ann", line(ids[1], 1))
	require.Equal(t, http.StatusConflict, again.status)
	require.Equal(t, domain.CodeDuplicateReservation, again.code)

	_, err := sys.pool.Exec(context.Background(), "UPDATE "+sys.schema+".inventory_reservations SET expires_at = now() - interval '1 second' WHERE user_id = 'ann'")
	require.NoError(t, err)
	require.Equal(t, 10, stockOf(t, sys, ids[0]).AvailableStock, "a lapsed reservation holds nothing")
	require.Equal(t, http.StatusOK, mustReserve(t, sys, "ann", line(ids[1], 1)).status)

	answers := make([]cartAnswer, len(ids))
	errs := make([]error, len(ids))
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			<-gate
			answers[i], errs[i] = reserveCart(sys, "bob", line(id, 1))
		})
	}
	close(gate)
	wg.Wait()
	won := 0
	for i, a := range answers {
		require.NoError(t, errs[i])
		if a.status == http.StatusOK {
			won++
			continue
		}
		require.Equal(t, domain.CodeDuplicateReservation, a.code)
	}
	require.Equal(t, 1, won, "one of bob's racing reserves")
	require.Equal(t, 1, liveUsers(t, sys, ids...)["bob"])
}

// Many users reserving carts of one or two of a few options at once:
// nothing is oversold, the tables hold exactly what each user was told,
// and every refusal names an option that ran out.
func TestCartRushNeverOversells(t *testing.T) {
	t.Parallel()
	sys := start(t, baseline.Cart, 0)
	const users, stock = 200, 20
	ids := createOptions(t, sys, stock, stock, stock, stock)
	rng := rand.New(rand.NewPCG(7, 7))
	carts := make([][]baseline.CartItem, users)
	for i := range carts {
		first := rng.IntN(len(ids))
		carts[i] = []baseline.CartItem{line(ids[first], 1+rng.IntN(2))}
		if rng.IntN(2) == 0 {
			carts[i] = append(carts[i], line(ids[(first+1+rng.IntN(len(ids)-1))%len(ids)], 1+rng.IntN(2)))
		}
	}
	answers := make([]cartAnswer, users)
	errs := make([]error, users)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range users {
		wg.Go(func() {
			<-gate
			answers[i], errs[i] = reserveCart(sys, fmt.Sprintf("user-%03d", i), carts[i]...)
		})
	}
	close(gate)
	wg.Wait()

	told := map[int64]int{}
	lines := map[string]int{}
	refused := map[int]cartAnswer{}
	for i, a := range answers {
		require.NoError(t, errs[i])
		if a.status != http.StatusOK {
			require.Equal(t, http.StatusConflict, a.status)
			require.Equal(t, domain.CodeInsufficientStock, a.code)
			refused[i] = a
			continue
		}
		require.Len(t, a.lines, len(carts[i]))
		for _, l := range a.lines {
			told[l.ProductOptionID] += l.Quantity
		}
		lines[fmt.Sprintf("user-%03d", i)] = len(a.lines)
	}
	require.NotEmpty(t, refused, "demand is about three times the stock")
	require.NotEmpty(t, lines)
	for _, id := range ids {
		st := stockOf(t, sys, id)
		require.LessOrEqual(t, st.ReservedQuantity, stock, "option %d oversold", id)
		require.Equal(t, told[id], st.ReservedQuantity, "option %d: reserved = what users were told", id)
	}
	require.Equal(t, lines, liveUsers(t, sys, ids...), "each user holds what it was told, once")
	for i, r := range refused {
		var want int
		for _, l := range carts[i] {
			if l.ProductOptionID == r.option {
				want = l.Quantity
			}
		}
		require.Positive(t, want, "user %d refused for option %d, not in its cart", i, r.option)
		require.Less(t, stockOf(t, sys, r.option).AvailableStock, want, "user %d refused for option %d while it had stock for the line", i, r.option)
	}
	t.Logf("%d users for %d options of %d: %d carts reserved, %d refused", users, len(ids), stock, len(lines), len(refused))
}

// Malformed calls are refused with seed 002's INVALID_INPUT and change
// nothing.
func TestCartBadRequests(t *testing.T) {
	t.Parallel()
	sys := start(t, baseline.Cart, 0)
	ids := createOptions(t, sys, 5)
	for _, tc := range []struct {
		name, user, body string
	}{
		{"no caller", "", fmt.Sprintf(`{"items":[{"productOptionId":%d,"quantity":1}]}`, ids[0])},
		{"someone else's userId", "carol", fmt.Sprintf(`{"userId":"dave","items":[{"productOptionId":%d,"quantity":1}]}`, ids[0])},
		{"malformed body", "carol", `{"items":`},
		{"zero quantity", "carol", fmt.Sprintf(`{"items":[{"productOptionId":%d,"quantity":0}]}`, ids[0])},
		{"one option twice", "carol", fmt.Sprintf(`{"items":[{"productOptionId":%[1]d,"quantity":1},{"productOptionId":%[1]d,"quantity":1}]}`, ids[0])},
	} {
		status, body, err := postJSON(sys, baseline.CartReservePath, tc.user, tc.body)
		require.NoError(t, err)
		a, err := decodeCartAnswer(status, body)
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, a.status, tc.name)
		require.Equal(t, domain.CodeInvalidInput, a.code, tc.name)
	}
	require.Zero(t, stockOf(t, sys, ids[0]).ReservedQuantity)
}
