package loadtest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/bench/baseline"
	"github.com/holdfast/holdfast/client"
	"github.com/holdfast/holdfast/domain"
)

// The cart rush: a shop running a limited drop. Users shoppers each have a
// cart of one or two of five hot product options (one unit each), set up
// before the rush; then every client reserves at once and waits for the
// outcome, with no confirm or release. With the defaults (3,000 users, 300
// units of each option) about a third of the units asked for exist. With
// one hot option (Options.HotOptions, load -hot-options 1) it is the drop
// of a single product option: every cart is one unit of it.
// cart-rush runs it against holdfast, baseline-cart against cmd/baseline's
// cart mode (seed 002's reserve done synchronously), with the same carts:
// user i's cart depends only on the seed and i.

// rushOptions is the number of hot options of a cart rush unless
// Options.HotOptions says otherwise.
const rushOptions = 5

// CartReport is what a cart rush saw, for make bench's cart section.
type CartReport struct {
	Options        int `json:"options"`
	StockPerOption int `json:"stockPerOption"`
	Carts          int `json:"carts"`
	UnitsAsked     int `json:"unitsAsked"`    // units in all carts
	CartsReserved  int `json:"cartsReserved"` // carts the clients were told were reserved
	CartsRefused   int `json:"cartsRefused"`  // carts refused INSUFFICIENT_AVAILABLE_STOCK
	UnitsReserved  int `json:"unitsReserved"` // Σ reservedQuantity the server reports
	UnitsTold      int `json:"unitsTold"`     // Σ units of the reservations the clients were told of
	// OversoldUnits is, summed over the options, what was reserved beyond
	// the stock, by the server's count or by what clients were told,
	// whichever is more.
	OversoldUnits int `json:"oversoldUnits"`
	// Duplicates counts users holding more than one reservation, as far as
	// the run can see: a reservation id told to two, and, where the server
	// lists who holds what (the baseline), users holding more rows than
	// their cart has lines. A reserve holdfast applied twice shows in
	// UnitsReserved ≠ UnitsTold instead.
	Duplicates int `json:"duplicates"`
}

// cartLine is one line of a user's cart.
type cartLine struct {
	option   int64
	quantity int
}

// rushCart is user i's cart: one or two of options (one if there is only
// one) and, with a tail, one of tail, drawn from seed and i alone, so that
// every run with the same seed gives user i the same cart.
func rushCart(seed uint64, i int, options, tail []int64) []cartLine {
	rng := rand.New(rand.NewPCG(seed, uint64(i)))
	first := rng.IntN(len(options))
	cart := []cartLine{{options[first], 1}}
	if len(options) > 1 && rng.IntN(2) == 0 {
		cart = append(cart, cartLine{options[(first+1+rng.IntN(len(options)-1))%len(options)], 1})
	}
	if len(tail) > 0 {
		cart = append(cart, cartLine{tail[rng.IntN(len(tail))], 1})
	}
	slices.SortFunc(cart, byOption)
	return cart
}

func byOption(a, b cartLine) int { return cmp.Compare(a.option, b.option) }

// makeRushOptions makes the rush's Options.HotOptions hot options with
// newOptions, which makes a product of options of the codes given and
// returns their ids; with Options.CartTail, first a catalog product of that
// many options, whose ids it returns in tail. Option codes carry the run's
// id, so runs can share a database.
func makeRushOptions(e *Env, newOptions func(product string, codes []string) ([]int64, error)) (options, tail []int64, err error) {
	if e.Opt.HotOptions < 0 || e.Opt.CartTail < 0 || e.Opt.Stock < 0 {
		return nil, nil, fmt.Errorf("hot options (%d), cart tail (%d) and stock (%d) must not be negative", e.Opt.HotOptions, e.Opt.CartTail, e.Opt.Stock)
	}
	codes := func(code string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%s-%d", e.RunID, code, i)
		}
		return out
	}
	if n := e.Opt.CartTail; n > 0 {
		if tail, err = newOptions("catalog "+e.RunID, codes("TAIL", n)); err != nil {
			return nil, nil, err
		}
	}
	options, err = newOptions("limited drop "+e.RunID, codes("DROP", orDefault(e.Opt.HotOptions, rushOptions)))
	return options, tail, err
}

// createOptions makes options of stock units each through api, holdfast's
// admin call, in products of at most maxProductOptions (the shop's bound).
func createOptions(ctx context.Context, api *client.Client, stock int) func(string, []string) ([]int64, error) {
	return func(product string, codes []string) ([]int64, error) {
		var ids []int64
		for first := 0; first < len(codes); first += maxProductOptions {
			var opts []client.NewOption
			for i, code := range codes[first:min(len(codes), first+maxProductOptions)] {
				opts = append(opts, client.NewOption{OptionCode: code, Price: 1000 * int64(first+i+1), StockQuantity: stock, IsActive: true})
			}
			p, err := api.CreateProduct(ctx, fmt.Sprintf("%s %d", product, first), opts...)
			if err != nil {
				return nil, fmt.Errorf("create product: %w", err)
			}
			for _, o := range p.Options {
				ids = append(ids, o.ProductOptionID)
			}
		}
		return ids, nil
	}
}

// maxProductOptions is the most options the shop takes in one product.
const maxProductOptions = 50

// reservedLine is a reservation line as a client was told of it.
type reservedLine struct {
	ReservationID   int64 `json:"reservationId"`
	ProductOptionID int64 `json:"productOptionId"`
	Quantity        int   `json:"quantity"`
}

// cartBook records what the clients of a cart rush were told and checks
// it against the server's stock.
type cartBook struct {
	stock   int
	options []int64
	carts   [][]cartLine
	users   []string // user i as the server names it

	mu      sync.Mutex
	told    map[int64]int // option → units told reserved
	holders map[int64]int // reservation id → user
	won     map[int]int   // user → lines told reserved
	refused map[int]int64 // user → the option its refusal named
	dups    map[int]bool  // users told of a reservation id another holds
	bad     violations
}

func newCartBook(seed uint64, users int, options, tail []int64, stock int) *cartBook {
	b := &cartBook{stock: stock, options: slices.Concat(options, tail), carts: make([][]cartLine, users), users: make([]string, users),
		told: map[int64]int{}, holders: map[int64]int{}, won: map[int]int{}, refused: map[int]int64{}, dups: map[int]bool{}}
	for i := range b.carts {
		b.carts[i] = rushCart(seed, i, options, tail)
	}
	return b
}

// reserved records user i told that lines are reserved: they must be its
// cart, line for line, under reservation ids no one else holds.
func (b *cartBook) reserved(i int, lines []reservedLine) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, again := b.won[i]; again {
		b.bad.add("user %s told twice that its cart is reserved", b.users[i])
		b.dups[i] = true
	}
	b.won[i] = len(lines)
	got := make([]cartLine, len(lines))
	for k, l := range lines {
		got[k] = cartLine{l.ProductOptionID, l.Quantity}
		b.told[l.ProductOptionID] += l.Quantity
		if other, taken := b.holders[l.ReservationID]; taken && other != i {
			b.bad.add("reservation %d told to users %s and %s", l.ReservationID, b.users[other], b.users[i])
			b.dups[i] = true
		}
		b.holders[l.ReservationID] = i
	}
	slices.SortFunc(got, byOption)
	if !slices.Equal(got, b.carts[i]) {
		b.bad.add("user %s: reserved %v, its cart is %v", b.users[i], got, b.carts[i])
	}
}

// refusedFor records user i told INSUFFICIENT_AVAILABLE_STOCK for option.
func (b *cartBook) refusedFor(i int, option int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refused[i] = option
}

// answered records the outcome of user i's reserve: its lines, or the option
// a refusal for stock names; any other answer is an error.
func (b *cartBook) answered(i int, out client.Outcome) error {
	var r struct {
		Reservations []reservedLine `json:"reservations"`
	}
	err := out.Decode(&r)
	var ce *client.Error
	if errors.As(err, &ce) && ce.Code == client.CodeInsufficientAvailableStock {
		b.refusedFor(i, refusedOption(ce))
		return nil
	}
	if err != nil {
		return fmt.Errorf("reserve for user %s: %w", b.users[i], err)
	}
	b.reserved(i, r.Reservations)
	return nil
}

// check compares what the clients were told with each option's stock as
// the server reports it (stocks, by option) and, when the server lists
// them, the live reservation rows of each user (live, nil otherwise).
// Nothing was confirmed or released, so every option must still have its
// stock, hold exactly the units its reservations were told, never more than
// its stock; and each refusal must name an option of the cart that ran out
// of what the line asked for (availability only falls during the rush).
func (b *cartBook) check(stocks map[int64]client.Stock, live map[string]int) ([]string, *CartReport) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := &CartReport{Options: len(b.options), StockPerOption: b.stock, Carts: len(b.carts),
		CartsReserved: len(b.won), CartsRefused: len(b.refused), Duplicates: len(b.dups)}
	out := b.bad.all()
	for _, cart := range b.carts {
		for _, l := range cart {
			r.UnitsAsked += l.quantity
		}
	}
	for _, id := range b.options {
		st := stocks[id]
		told := b.told[id]
		r.UnitsReserved += st.ReservedQuantity
		r.UnitsTold += told
		r.OversoldUnits += max(0, st.ReservedQuantity-b.stock, told-b.stock)
		if st.StockQuantity != b.stock {
			out = append(out, fmt.Sprintf("option %d: stock %d, want %d (nothing was confirmed)", id, st.StockQuantity, b.stock))
		}
		if st.ReservedQuantity != told {
			out = append(out, fmt.Sprintf("option %d: %d units reserved, clients were told of %d", id, st.ReservedQuantity, told))
		}
		if max(st.ReservedQuantity, told) > b.stock {
			out = append(out, fmt.Sprintf("option %d oversold: %d reserved (%d told) of %d", id, st.ReservedQuantity, told, b.stock))
		}
	}
	out = append(out, b.checkRefusals(stocks)...)
	if live != nil {
		out = append(out, b.checkLive(live, r)...)
	}
	return out, r
}

func (b *cartBook) checkRefusals(stocks map[int64]client.Stock) []string {
	var out []string
	for i, option := range b.refused {
		k := slices.IndexFunc(b.carts[i], func(l cartLine) bool { return l.option == option })
		switch {
		case k < 0:
			out = append(out, fmt.Sprintf("user %s refused for option %d, not in its cart %v", b.users[i], option, b.carts[i]))
		case stocks[option].AvailableStock >= b.carts[i][k].quantity:
			out = append(out, fmt.Sprintf("user %s refused for option %d, which has %d available", b.users[i], option, stocks[option].AvailableStock))
		}
	}
	return out
}

// checkLive compares each user's live reservation rows with what it was
// told: its cart's lines if reserved, none if refused.
func (b *cartBook) checkLive(live map[string]int, r *CartReport) []string {
	var out []string
	byName := make(map[string]int, len(b.users))
	for i, u := range b.users {
		byName[u] = i
	}
	for user, rows := range live {
		i, ok := byName[user]
		if !ok {
			out = append(out, fmt.Sprintf("user %q, not of this run, holds %d reservations on its options", user, rows))
			continue
		}
		if want := b.won[i]; rows != want {
			out = append(out, fmt.Sprintf("user %s holds %d reservation rows, was told of %d", user, rows, want))
			if want > 0 && rows > want && !b.dups[i] {
				r.Duplicates++
			}
		}
	}
	for i, lines := range b.won {
		if live[b.users[i]] == 0 {
			out = append(out, fmt.Sprintf("user %s was told of %d reserved lines, holds none", b.users[i], lines))
		}
	}
	return out
}

// refusedOption is the option an INSUFFICIENT_AVAILABLE_STOCK names, 0 if
// none.
func refusedOption(e *client.Error) int64 {
	switch v := e.Meta["productOptionId"].(type) {
	case float64:
		return int64(v)
	case json.Number:
		n, _ := v.Int64()
		return n
	}
	return 0
}

// cartRush: the cart rush against holdfast. Setup creates the options, the
// users and their carts (concurrently, before the measured phase); each
// journey is one POST /api/v1/orders/reserve and the wait for its outcome.
type cartRush struct {
	book    *cartBook
	uids    []int64
	clients []*client.Client
	report  *CartReport // made by Check
}

func (s *cartRush) Setup(ctx context.Context, e *Env) (int, error) {
	n, stock := orDefault(e.Opt.Users, 3000), orDefault(e.Opt.Stock, 300)
	options, tail, err := makeRushOptions(e, createOptions(ctx, e.Admin, stock))
	if err != nil {
		return 0, err
	}
	s.book = newCartBook(e.Opt.Seed, n, options, tail, stock)
	s.uids, s.clients = make([]int64, n), make([]*client.Client, n)
	err = forEach(n, min(e.Opt.Concurrency, 64), func(i int) error {
		u, err := e.Admin.CreateUser(ctx, fmt.Sprintf("%s shopper %d", e.RunID, i))
		if err != nil {
			return fmt.Errorf("create user: %w", err)
		}
		c, err := e.As(strconv.FormatInt(u.UserID, 10), domain.RoleUser)
		if err != nil {
			return err
		}
		for _, l := range s.book.carts[i] {
			if err := c.SetCartItem(ctx, l.option, l.quantity); err != nil {
				return fmt.Errorf("cart of user %d: %w", u.UserID, err)
			}
		}
		s.uids[i], s.clients[i], s.book.users[i] = u.UserID, c, strconv.FormatInt(u.UserID, 10)
		return nil
	})
	return n, err
}

func (s *cartRush) Journey(ctx context.Context, e *Env, i int) error {
	c, uid := s.clients[i], s.uids[i]
	out, err := queued{e, c}.write(ctx, "order.reserve", http.MethodPost, "/api/v1/orders/reserve", map[string]int64{"userId": uid})
	if err != nil {
		return err
	}
	return s.book.answered(i, out)
}

// Check reads each option's stock from the API. holdfast lists no user's
// reservations, so a reserve applied twice shows as units reserved that no
// client was told of.
func (s *cartRush) Check(ctx context.Context, e *Env) ([]string, error) {
	stocks := make(map[int64]client.Stock, len(s.book.options))
	for _, id := range s.book.options {
		st, err := e.Admin.Stock(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("stock of option %d: %w", id, err)
		}
		stocks[id] = st
	}
	out, r := s.book.check(stocks, nil)
	s.report = r
	return out, nil
}

func (s *cartRush) cartReport() *CartReport { return s.report }

// baselineCart: the same cart rush against cmd/baseline's cart mode, seed
// 002's reserve done synchronously: each journey is one POST
// /api/v1/orders/reserve carrying the cart, answered with the reservations
// or the refusal. Its options are written into the design's tables, and
// its checks read each option's stock and who holds what there.
type baselineCart struct{ cartRush }

func (s *baselineCart) Setup(ctx context.Context, e *Env) (int, error) {
	n, stock := orDefault(e.Opt.Users, 3000), orDefault(e.Opt.Stock, 300)
	err := inBaselineDB(ctx, e, func(db *pgxpool.Pool, schema string) error {
		options, tail, err := makeRushOptions(e, func(product string, codes []string) ([]int64, error) {
			return baseline.NewOptions(ctx, db, schema, product, stock, codes...)
		})
		if err == nil {
			s.book = newCartBook(e.Opt.Seed, n, options, tail, stock)
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	for i := range s.book.users {
		s.book.users[i] = e.userID(i)
	}
	return n, warmUp(ctx, e)
}

func (s *baselineCart) Journey(ctx context.Context, e *Env, i int) error {
	user := s.book.users[i]
	body := baseline.CartRequest{UserID: user}
	for _, l := range s.book.carts[i] {
		body.Items = append(body.Items, baseline.CartItem{ProductOptionID: l.option, Quantity: l.quantity})
	}
	out, err := syncWriter{e, user}.write(ctx, "order.reserve", http.MethodPost, baseline.CartReservePath, body)
	if err != nil {
		return err
	}
	return s.book.answered(i, out)
}

func (s *baselineCart) Check(ctx context.Context, e *Env) (out []string, err error) {
	err = inBaselineDB(ctx, e, func(db *pgxpool.Pool, schema string) error {
		stocks, err := baseline.Stocks(ctx, db, schema, s.book.options)
		if err != nil {
			return err
		}
		live, err := baseline.LiveRows(ctx, db, schema, s.book.options)
		out, s.report = s.book.check(stocks, live)
		return err
	})
	return out, err
}
