package baseline

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5"
)

// The cart mode is seed 002's order reserve built the way a shop would
// build it without a queue: one transaction per HTTP request, answered with
// its outcome. The strongest plain form of it, so that make bench compares
// designs rather than a careless baseline:
//
//   - every statement is prepared once per pooled connection (pgx's
//     statement cache) and costs one round trip; the pool is sized like
//     holdfast's (PG_MAX_CONNS);
//   - BEGIN; a transaction-scoped advisory lock on the user, so that two
//     reserves of one user cannot both pass the duplicate check (the seed's
//     COUNT alone lets them); the cart's options locked in id order with
//     SELECT … FOR UPDATE (seed §4: no deadlock between carts); then, in a
//     statement of its own so that its snapshot sees every reservation
//     committed by the transactions it waited for, the user's live
//     reservations and each option's live reserved sum; the whole cart is
//     refused if any line does not fit; else all lines in one INSERT; COMMIT.
//     Six round trips for a reservation, five for a refusal, three of them
//     while the options are locked;
//   - availability is stock − Σ quantity of RESERVED rows whose expires_at
//     is past now (SPEC §5's reading of the seed), on the seed's indexes.
//
// The cart comes in the request's body, where holdfast reads it from its
// cart table at intake: one read the baseline is spared. There is no
// confirm, release or expiry sweep; a lapsed reservation simply stops
// counting.

// Cart mode paths. The reserve and the stock read have holdfast's paths and
// shapes, so the load tool drives both with the same calls; the product
// call creates the fixture, and the live call lets it check the tables.
const (
	// CartReservePath is the reserve (POST): body CartRequest, caller in
	// X-User-Id.
	CartReservePath = "/api/v1/orders/reserve"
	// CartProductsPath creates a product with its options (POST), as
	// holdfast's admin call does: {name, options: [{optionCode, price,
	// stockQuantity, isActive}]} → 201 {productId, name, options:
	// [{productOptionId, optionCode, stockQuantity}]}.
	CartProductsPath = "/api/v1/products"
	// CartStockPath reads an option's stock (GET), as holdfast's does:
	// {productOptionId, stockQuantity, reservedQuantity, availableStock}.
	CartStockPath = "/api/v1/product-options/"
	// CartLivePath lists who holds live reservations on some options (GET
	// ?productOptionIds=1,2,3): {"users": {"<user>": <reservation rows>}}.
	CartLivePath = "/api/v1/reservations/live"
	// CartTTL is how long a reservation holds its stock (seed 002).
	CartTTL = 30 * time.Minute
)

// Seed 002's error codes, as the cart mode answers them.
const (
	CodeCartEmpty         = "CART_EMPTY"
	CodeOptionInactive    = "PRODUCT_OPTION_INACTIVE"
	CodeInsufficientStock = "INSUFFICIENT_AVAILABLE_STOCK"
	CodeDuplicate         = "DUPLICATE_RESERVATION"
	CodeInvalidInput      = "INVALID_INPUT"
	// CodeConflict refuses a product whose option code exists, as
	// holdfast's product write does.
	CodeConflict = "CONFLICT"
	// CodeNotFound answers a stock read of an option that does not exist.
	CodeNotFound = "NOT_FOUND"
)

// CartItem is one line of a cart.
type CartItem struct {
	ProductOptionID int64 `json:"productOptionId"`
	Quantity        int   `json:"quantity"`
}

// CartRequest is the reserve's body. UserID, when given, must name the
// caller of X-User-Id.
type CartRequest struct {
	UserID string     `json:"userId,omitempty"`
	Items  []CartItem `json:"items"`
}

// CartReservation is one reserved line, in seed 002 §2's shape.
type CartReservation struct {
	ReservationID   int64     `json:"reservationId"`
	ProductOptionID int64     `json:"productOptionId"`
	ProductName     string    `json:"productName"`
	OptionCode      string    `json:"optionCode"`
	Quantity        int       `json:"quantity"`
	Status          string    `json:"status"`
	AvailableStock  int       `json:"availableStock"`
	ReservedAt      time.Time `json:"reservedAt"`
	ExpiresAt       time.Time `json:"expiresAt"`
}

// CartReply is the reserve's 200 answer: {"data": {"reservations": [...]}}.
type CartReply struct {
	Data struct {
		Reservations []CartReservation `json:"reservations"`
	} `json:"data"`
}

// CartRefusal is a reserve refused by the rules, answered with Status and
// {"error": {"code", "message", "meta": {"productOptionId"}}}; the option is
// named for INSUFFICIENT_AVAILABLE_STOCK and PRODUCT_OPTION_INACTIVE.
type CartRefusal struct {
	Status          int
	Code            string
	Message         string
	ProductOptionID int64
}

func (r *CartRefusal) Error() string { return r.Code + ": " + r.Message }

func refuse(status int, code, format string, args ...any) *CartRefusal {
	return &CartRefusal{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// cartQueries are the cart mode's statements, schema spelled out.
type cartQueries struct {
	lockUser    string // the caller's advisory lock
	lockOptions string // the cart's options, locked in id order
	live        string // the caller's live reservations and each option's live sum
	insert      string // every line at once
	stock       string // an option's stock and live reserved sum
	liveUsers   string // live reservation rows by user, on some options
	product     string // a new product
	option      string // a new option
}

// cartLocks says which of the reserve's locks are taken: both, but for the
// tests that show what each prevents.
type cartLocks struct {
	options bool // SELECT … FOR UPDATE on the cart's options
	user    bool // the caller's advisory lock
}

// allLocks are the reserve's locks.
var allLocks = cartLocks{options: true, user: true}

// newCartQueries builds the statements, with the locks of locks.
func newCartQueries(schema string, locks cartLocks) cartQueries {
	q := func(table string) string { return pgx.Identifier{schema, table}.Sanitize() }
	products, options, reservations := q("products"), q("product_options"), q("inventory_reservations")
	forUpdate, lockUser := "", `SELECT $1::text`
	if locks.options {
		forUpdate = " FOR UPDATE OF o"
	}
	if locks.user {
		lockUser = `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`
	}
	live := `status = 'RESERVED' AND expires_at > now()`
	return cartQueries{
		lockUser: lockUser,
		lockOptions: `SELECT o.id, p.name, o.option_code, o.stock_quantity, o.is_active
			FROM ` + options + ` o JOIN ` + products + ` p ON p.id = o.product_id
			WHERE o.id = ANY($1) ORDER BY o.id` + forUpdate,
		live: `SELECT (SELECT count(*) FROM ` + reservations + ` WHERE user_id = $2 AND ` + live + `),
				coalesce(array_agg(product_option_id), '{}'), coalesce(array_agg(reserved), '{}')
			FROM (SELECT product_option_id, sum(quantity)::int AS reserved FROM ` + reservations + `
				WHERE product_option_id = ANY($1) AND ` + live + ` GROUP BY product_option_id) s`,
		insert: `INSERT INTO ` + reservations + `
				(product_option_id, user_id, quantity, status, reserved_at, expires_at, updated_at)
			SELECT l.option, $2, l.quantity, 'RESERVED', now(), now() + interval '` + strconv.Itoa(int(CartTTL.Minutes())) + ` minutes', now()
			FROM unnest($1::bigint[], $3::int[]) AS l(option, quantity)
			RETURNING id, product_option_id, quantity, reserved_at, expires_at`,
		stock: `SELECT o.stock_quantity, coalesce((SELECT sum(r.quantity) FROM ` + reservations + ` r
				WHERE r.product_option_id = o.id AND r.status = 'RESERVED' AND r.expires_at > now()), 0)
			FROM ` + options + ` o WHERE o.id = $1`,
		liveUsers: `SELECT user_id, count(*) FROM ` + reservations + `
			WHERE product_option_id = ANY($1) AND ` + live + ` GROUP BY user_id`,
		product: `INSERT INTO ` + products + ` (name) VALUES ($1) RETURNING id`,
		option: `INSERT INTO ` + options + ` (product_id, option_code, price, stock_quantity, is_active)
			VALUES ($1, $2, $3, $4, $5) RETURNING id`,
	}
}

func (s *Server) mountCart() {
	s.app.Post(CartReservePath, s.reserveCart)
	s.app.Post(CartProductsPath, s.createProduct)
	s.app.Get(CartStockPath+":id/stock", s.stock)
	s.app.Get(CartLivePath, s.liveUsers)
}

// reserveCart answers a reserve: 200 with the reservations, or the
// refusal's status and code.
func (s *Server) reserveCart(c *fiber.Ctx) error {
	user := strings.Clone(c.Get(UserHeader))
	items, refusal := readCart(user, c.Body())
	if refusal != nil {
		return answerRefusal(c, refusal)
	}
	lines, err := s.reserveItems(c.UserContext(), user, items)
	if errors.As(err, &refusal) {
		return answerRefusal(c, refusal)
	}
	if err != nil {
		return err
	}
	var reply CartReply
	reply.Data.Reservations = lines
	return c.JSON(reply)
}

// readCart validates a reserve's caller and body and returns its lines in
// option id order, the order they are locked in.
func readCart(user string, body []byte) ([]CartItem, *CartRefusal) {
	if user == "" {
		return nil, refuse(http.StatusBadRequest, CodeInvalidInput, "%s header is required", UserHeader)
	}
	var req CartRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, refuse(http.StatusBadRequest, CodeInvalidInput, `body must be {"userId": "...", "items": [{"productOptionId": 1, "quantity": 1}]}`)
	}
	if req.UserID != "" && req.UserID != user {
		return nil, refuse(http.StatusBadRequest, CodeInvalidInput, "userId %q is not the caller %q", req.UserID, user)
	}
	if len(req.Items) == 0 {
		return nil, refuse(http.StatusBadRequest, CodeCartEmpty, "the cart is empty")
	}
	items := slices.Clone(req.Items)
	slices.SortFunc(items, func(a, b CartItem) int { return cmp.Compare(a.ProductOptionID, b.ProductOptionID) })
	for i, it := range items {
		if it.Quantity <= 0 || it.ProductOptionID <= 0 {
			return nil, refuse(http.StatusBadRequest, CodeInvalidInput, "each line needs a productOptionId and a positive quantity")
		}
		if i > 0 && items[i-1].ProductOptionID == it.ProductOptionID {
			return nil, refuse(http.StatusBadRequest, CodeInvalidInput, "product option %d is on two lines", it.ProductOptionID)
		}
	}
	return items, nil
}

func answerRefusal(c *fiber.Ctx, r *CartRefusal) error {
	e := fiber.Map{"code": r.Code, "message": r.Message}
	if r.ProductOptionID != 0 {
		e["meta"] = fiber.Map{"productOptionId": r.ProductOptionID}
	}
	return c.Status(r.Status).JSON(fiber.Map{"error": e})
}

// lockedOption is an option as the reserve's lock read it.
type lockedOption struct {
	name, code string
	stock      int
	active     bool
}

// reserveItems is the reserve's transaction: all of items reserved for
// user, or a *CartRefusal and nothing.
func (s *Server) reserveItems(ctx context.Context, user string, items []CartItem) ([]CartReservation, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("baseline: begin reserve: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	ids, quantities := make([]int64, len(items)), make([]int32, len(items))
	for i, it := range items {
		ids[i], quantities[i] = it.ProductOptionID, int32(it.Quantity)
	}
	if _, err := tx.Exec(ctx, s.cart.lockUser, user); err != nil {
		return nil, fmt.Errorf("baseline: lock user: %w", err)
	}
	opts, err := s.lockOptions(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	available, err := s.available(ctx, tx, user, ids, opts)
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		if available[it.ProductOptionID] < it.Quantity {
			r := refuse(http.StatusConflict, CodeInsufficientStock, "not enough available stock for product option %d", it.ProductOptionID)
			r.ProductOptionID = it.ProductOptionID
			return nil, r
		}
	}
	if s.beforeInsert != nil {
		s.beforeInsert(user)
	}
	lines, err := s.insertLines(ctx, tx, user, ids, quantities, opts, available)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("baseline: commit reserve: %w", err)
	}
	return lines, nil
}

// lockOptions locks the options of ids in id order and reads them; an
// option that does not exist or is inactive refuses the cart.
func (s *Server) lockOptions(ctx context.Context, tx pgx.Tx, ids []int64) (map[int64]lockedOption, error) {
	rows, err := tx.Query(ctx, s.cart.lockOptions, ids)
	if err != nil {
		return nil, fmt.Errorf("baseline: lock options: %w", err)
	}
	opts := make(map[int64]lockedOption, len(ids))
	var id int64
	var o lockedOption
	_, err = pgx.ForEachRow(rows, []any{&id, &o.name, &o.code, &o.stock, &o.active}, func() error {
		opts[id] = o
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("baseline: lock options: %w", err)
	}
	for _, id := range ids {
		if !opts[id].active {
			r := refuse(http.StatusBadRequest, CodeOptionInactive, "the cart holds an inactive product option")
			r.ProductOptionID = id
			return nil, r
		}
	}
	return opts, nil
}

// available refuses a user who holds a live reservation and returns each
// option's available stock: its stock less its live reserved sum. It runs
// after the locks, in a statement of its own: its snapshot then includes
// every reserve that held an option before this one.
func (s *Server) available(ctx context.Context, tx pgx.Tx, user string, ids []int64, opts map[int64]lockedOption) (map[int64]int, error) {
	var live int
	var reservedIDs []int64
	var reserved []int32
	if err := tx.QueryRow(ctx, s.cart.live, ids, user).Scan(&live, &reservedIDs, &reserved); err != nil {
		return nil, fmt.Errorf("baseline: read live reservations: %w", err)
	}
	if live > 0 {
		return nil, refuse(http.StatusConflict, CodeDuplicate, "an order reservation is already in progress")
	}
	available := make(map[int64]int, len(opts))
	for id, o := range opts {
		available[id] = o.stock
	}
	for i, id := range reservedIDs {
		available[id] -= int(reserved[i])
	}
	return available, nil
}

// insertLines inserts every line in one statement and returns them in the
// seed's shape, each with the stock left available after it.
func (s *Server) insertLines(ctx context.Context, tx pgx.Tx, user string, ids []int64, quantities []int32,
	opts map[int64]lockedOption, available map[int64]int) ([]CartReservation, error) {
	rows, err := tx.Query(ctx, s.cart.insert, ids, user, quantities)
	if err != nil {
		return nil, fmt.Errorf("baseline: insert reservations: %w", err)
	}
	var lines []CartReservation
	var r CartReservation
	_, err = pgx.ForEachRow(rows, []any{&r.ReservationID, &r.ProductOptionID, &r.Quantity, &r.ReservedAt, &r.ExpiresAt}, func() error {
		o := opts[r.ProductOptionID]
		r.ProductName, r.OptionCode, r.Status = o.name, o.code, "RESERVED"
		r.AvailableStock = available[r.ProductOptionID] - r.Quantity
		r.ReservedAt, r.ExpiresAt = r.ReservedAt.UTC(), r.ExpiresAt.UTC()
		lines = append(lines, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("baseline: insert reservations: %w", err)
	}
	slices.SortFunc(lines, func(a, b CartReservation) int { return cmp.Compare(a.ProductOptionID, b.ProductOptionID) })
	return lines, nil
}

// NewCartOption is an option of a product to create.
type NewCartOption struct {
	OptionCode    string `json:"optionCode"`
	Price         int64  `json:"price"`
	StockQuantity int    `json:"stockQuantity"`
	IsActive      *bool  `json:"isActive"` // default true
}

// CartProduct is a created product.
type CartProduct struct {
	ProductID int64               `json:"productId"`
	Name      string              `json:"name"`
	Options   []CreatedCartOption `json:"options"`
}

// CreatedCartOption is a created option.
type CreatedCartOption struct {
	ProductOptionID int64  `json:"productOptionId"`
	OptionCode      string `json:"optionCode"`
	StockQuantity   int    `json:"stockQuantity"`
}

// createProduct creates a product and its options in one transaction: the
// fixture of a run. An option code that exists refuses the whole product.
func (s *Server) createProduct(c *fiber.Ctx) error {
	var in struct {
		Name    string          `json:"name"`
		Options []NewCartOption `json:"options"`
	}
	if err := json.Unmarshal(c.Body(), &in); err != nil || in.Name == "" || len(in.Options) == 0 {
		return answerRefusal(c, refuse(http.StatusBadRequest, CodeInvalidInput, "body must be {name, options: [{optionCode, price, stockQuantity, isActive}]}"))
	}
	for _, o := range in.Options {
		if o.OptionCode == "" || o.Price < 0 || o.StockQuantity < 0 {
			return answerRefusal(c, refuse(http.StatusBadRequest, CodeInvalidInput, "each option needs an optionCode, and price and stockQuantity must not be negative"))
		}
	}
	p := CartProduct{Name: in.Name}
	err := pgx.BeginFunc(c.UserContext(), s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(c.UserContext(), s.cart.product, in.Name).Scan(&p.ProductID); err != nil {
			return err
		}
		for _, o := range in.Options {
			created := CreatedCartOption{OptionCode: o.OptionCode, StockQuantity: o.StockQuantity}
			active := o.IsActive == nil || *o.IsActive
			if err := tx.QueryRow(c.UserContext(), s.cart.option, p.ProductID, o.OptionCode, o.Price, o.StockQuantity, active).
				Scan(&created.ProductOptionID); err != nil {
				return err
			}
			p.Options = append(p.Options, created)
		}
		return nil
	})
	if isUniqueViolation(err) {
		return answerRefusal(c, refuse(http.StatusConflict, CodeConflict, "an option code of the product exists"))
	}
	if err != nil {
		return fmt.Errorf("baseline: create product: %w", err)
	}
	return c.Status(http.StatusCreated).JSON(p)
}

// CartStock is an option's stock, as holdfast's stock read answers it.
type CartStock struct {
	ProductOptionID  int64 `json:"productOptionId"`
	StockQuantity    int   `json:"stockQuantity"`
	ReservedQuantity int   `json:"reservedQuantity"`
	AvailableStock   int   `json:"availableStock"`
}

func (s *Server) stock(c *fiber.Ctx) error {
	id, err := strconv.ParseInt(c.Params("id"), 10, 64)
	if err != nil {
		return answerRefusal(c, refuse(http.StatusBadRequest, CodeInvalidInput, "the product option id must be a number"))
	}
	st := CartStock{ProductOptionID: id}
	err = s.pool.QueryRow(c.UserContext(), s.cart.stock, id).Scan(&st.StockQuantity, &st.ReservedQuantity)
	if errors.Is(err, pgx.ErrNoRows) {
		return answerRefusal(c, refuse(http.StatusNotFound, CodeNotFound, "no product option %d", id))
	}
	if err != nil {
		return fmt.Errorf("baseline: stock: %w", err)
	}
	st.AvailableStock = st.StockQuantity - st.ReservedQuantity
	return c.JSON(st)
}

// liveUsers counts the live reservation rows of each user on the options
// named in ?productOptionIds=, so a check can compare them with what each
// user was told.
func (s *Server) liveUsers(c *fiber.Ctx) error {
	var ids []int64
	for _, f := range strings.Split(c.Query("productOptionIds"), ",") {
		id, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
		if err != nil {
			return answerRefusal(c, refuse(http.StatusBadRequest, CodeInvalidInput, "productOptionIds must be a comma-separated list of ids"))
		}
		ids = append(ids, id)
	}
	rows, err := s.pool.Query(c.UserContext(), s.cart.liveUsers, ids)
	if err != nil {
		return fmt.Errorf("baseline: live reservations: %w", err)
	}
	users := map[string]int{}
	var user string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&user, &n}, func() error {
		users[user] = n
		return nil
	}); err != nil {
		return fmt.Errorf("baseline: live reservations: %w", err)
	}
	return c.JSON(fiber.Map{"users": users})
}
