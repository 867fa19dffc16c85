package loadtest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/bench/baseline"
	"github.com/holdfast/holdfast/client"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/internal/testenv"
)

// A user's cart depends on the seed and the user alone: one or two
// different options, one unit each, about half of the carts with two.
func TestRushCartsDependOnSeedAndUserOnly(t *testing.T) {
	options := []int64{11, 12, 13, 14, 15}
	twos := 0
	for i := range 1000 {
		cart := rushCart(1, i, options, nil)
		require.Equal(t, cart, rushCart(1, i, options, nil), "user %d", i)
		require.True(t, len(cart) == 1 || len(cart) == 2)
		if len(cart) == 2 {
			twos++
			require.Less(t, cart[0].option, cart[1].option, "two different options, in id order")
		}
		for _, l := range cart {
			require.Contains(t, options, l.option)
			require.Equal(t, 1, l.quantity)
		}
	}
	require.InDelta(t, 500, twos, 60)
	differ := 0
	for i := range 100 {
		if !equalCarts(rushCart(1, i, options, nil), rushCart(2, i, options, nil)) {
			differ++
		}
	}
	require.Greater(t, differ, 50, "another seed, other carts")
}

// With a tail, each cart is its drop cart, as without one, and one option
// of the tail.
func TestRushCartsWithATailAddOneOfIt(t *testing.T) {
	options, tail := []int64{11, 12, 13, 14, 15}, []int64{1, 2, 3}
	seen := map[int64]bool{}
	for i := range 300 {
		cart := rushCart(1, i, options, tail)
		var drop []cartLine
		var fromTail []int64
		for _, l := range cart {
			if slices.Contains(tail, l.option) {
				fromTail = append(fromTail, l.option)
			} else {
				drop = append(drop, l)
			}
		}
		require.Len(t, fromTail, 1, "user %d: %v", i, cart)
		require.Equal(t, rushCart(1, i, options, nil), drop, "user %d", i)
		require.True(t, slices.IsSortedFunc(cart, byOption))
		seen[fromTail[0]] = true
	}
	require.Len(t, seen, len(tail))
}

// With one hot option, the drop: every cart is one unit of it, and, with
// a tail, one option of the tail besides.
func TestRushCartsOfOneOptionAreOneUnitOfIt(t *testing.T) {
	for i := range 300 {
		require.Equal(t, []cartLine{{7, 1}}, rushCart(1, i, []int64{7}, nil), "user %d", i)
		cart := rushCart(1, i, []int64{7}, []int64{1, 2, 3})
		require.Len(t, cart, 2, "user %d", i)
		require.Equal(t, cartLine{7, 1}, cart[1], "user %d: the drop's line, after the tail's", i)
	}
}

// The drop of one option on both sides, against real servers: the
// synchronous reserve (cmd/baseline's cart mode) and holdfast's API and
// worker. Every cart is one unit of the option; exactly the stock is
// reserved, each of it to a user of its own, the rest refused. A
// negative number of options is refused before anything is created.
func TestDropOfOneOption(t *testing.T) {
	t.Parallel()
	const users, stock = 60, 20
	drop := func(t *testing.T, scenario string, opt Options) *Report {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		opt.Users, opt.Stock, opt.HotOptions, opt.Concurrency = users, stock, -1, 20
		_, err := Run(ctx, scenario, opt)
		require.ErrorContains(t, err, "hot options (-1), cart tail (0) and stock (20) must not be negative")
		opt.HotOptions = 1
		rep, err := Run(ctx, scenario, opt)
		require.NoError(t, err)
		require.True(t, rep.OK, "%v", rep.Violations)
		require.Equal(t, CartReport{Options: 1, StockPerOption: stock, Carts: users, UnitsAsked: users, CartsReserved: stock,
			CartsRefused: users - stock, UnitsReserved: stock, UnitsTold: stock}, *rep.Cart)
		return rep
	}
	t.Run("synchronous", func(t *testing.T) {
		t.Parallel()
		url, dbURL := startBaseline(t, baseline.Cart)
		rep := drop(t, "baseline-cart", Options{BaseURL: url, Secret: "x", DatabaseURL: dbURL})
		require.Equal(t, map[string]int{"order.reserve.sync succeeded": stock,
			"order.reserve.sync rejected INSUFFICIENT_AVAILABLE_STOCK": users - stock}, rep.Outcomes)
	})
	t.Run("holdfast", func(t *testing.T) {
		t.Parallel()
		s := systest.Start(t, systest.Options{Workers: 1, Overrides: []string{"RATE_LIMIT_PER_USER", "0"}})
		rep := drop(t, "cart-rush", Options{BaseURL: s.URL, Secret: s.Cfg.JWTSecret, PreferWait: 10 * time.Second})
		require.Equal(t, map[string]int{"order.reserve succeeded": stock,
			"order.reserve rejected INSUFFICIENT_AVAILABLE_STOCK": users - stock}, rep.Outcomes)
	})
}

// startBaseline serves cmd/baseline's mode, its tables in an empty schema
// of the test's own, and returns its URL and the database URL whose
// search_path selects that schema, for the scenario's fixture and checks.
func startBaseline(t *testing.T, mode baseline.Mode) (string, string) {
	t.Helper()
	dbURL := testenv.EmptySchemaOn(t, testenv.PGServerURL())
	pool := testenv.Pool(t, dbURL)
	var schema string
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT current_schema()").Scan(&schema))
	require.NoError(t, baseline.Setup(t.Context(), pool, mode, schema, 0))
	srv, err := baseline.New(pool, baseline.Options{Mode: mode, Schema: schema, ShutdownTimeout: time.Second})
	require.NoError(t, err)
	return testenv.Serve(t, srv.Serve), dbURL
}

func equalCarts(a, b []cartLine) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The cart checks must be able to fail: these feed them what an
// overselling, duplicating or wrongly refusing server would have told its
// clients and reported.
func TestCartBookFindsViolations(t *testing.T) {
	options := []int64{1, 2}
	book := func() *cartBook {
		b := newCartBook(1, 4, options, nil, 2)
		for i := range b.users {
			b.users[i] = string(rune('a' + i))
		}
		b.carts = [][]cartLine{{{1, 1}}, {{1, 1}, {2, 1}}, {{2, 1}}, {{1, 1}}}
		return b
	}
	stock := func(reserved1, reserved2 int) map[int64]client.Stock {
		return map[int64]client.Stock{
			1: {ProductOptionID: 1, StockQuantity: 2, ReservedQuantity: reserved1, AvailableStock: 2 - reserved1},
			2: {ProductOptionID: 2, StockQuantity: 2, ReservedQuantity: reserved2, AvailableStock: 2 - reserved2},
		}
	}

	b := book()
	b.reserved(0, []reservedLine{{100, 1, 1}})
	b.reserved(1, []reservedLine{{101, 1, 1}, {102, 2, 1}})
	b.refusedFor(3, 1)
	v, r := b.check(stock(2, 1), map[string]int{"a": 1, "b": 2})
	require.Empty(t, v, "a clean run")
	require.Equal(t, CartReport{Options: 2, StockPerOption: 2, Carts: 4, UnitsAsked: 5, CartsReserved: 2, CartsRefused: 1,
		UnitsReserved: 3, UnitsTold: 3}, *r)

	b = book()
	b.reserved(0, []reservedLine{{100, 1, 1}})
	b.reserved(1, []reservedLine{{101, 1, 1}, {102, 2, 1}})
	b.reserved(3, []reservedLine{{103, 1, 1}})
	v, r = b.check(stock(3, 1), nil)
	require.Equal(t, 1, r.OversoldUnits)
	require.Len(t, v, 1)
	require.Contains(t, v[0], "option 1 oversold: 3 reserved (3 told) of 2")

	b = book()
	b.reserved(0, []reservedLine{{100, 1, 1}})
	b.reserved(2, []reservedLine{{100, 2, 1}}) // a reservation id told to two users
	b.reserved(3, []reservedLine{{103, 2, 1}}) // not user d's cart
	b.refusedFor(1, 2)                         // option 2 ran out: a fair refusal
	v, r = b.check(stock(2, 2), map[string]int{"a": 2, "c": 1, "d": 1, "x": 1})
	require.Equal(t, 2, r.Duplicates, "c told of a's reservation id; a holds two rows")
	require.ElementsMatch(t, []string{
		"reservation 100 told to users a and c",
		"user d: reserved [{2 1}], its cart is [{1 1}]",
		"option 1: 2 units reserved, clients were told of 1",
		`user "x", not of this run, holds 1 reservations on its options`,
		"user a holds 2 reservation rows, was told of 1",
	}, v)

	b = book()
	b.refusedFor(1, 2)
	b.refusedFor(2, 1)
	v, _ = b.check(stock(0, 0), map[string]int{})
	require.ElementsMatch(t, []string{
		"user b refused for option 2, which has 2 available",
		"user c refused for option 1, not in its cart [{2 1}]",
	}, v)
}
