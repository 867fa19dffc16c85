package baseline

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/domain"
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
// counting. Refusals carry seed 002's codes, with holdfast's statuses.

const (
	// CartReservePath is the reserve (POST): body CartRequest, caller in
	// X-User-Id, answered 200 with CartReply or with a refusal.
	CartReservePath = "/api/v1/orders/reserve"
	// CartTTL is how long a reservation holds its stock (seed 002).
	CartTTL = 30 * time.Minute
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

// CartReply is the reserve's 200 answer, as holdfast's reserve outcome's
// result.
type CartReply struct {
	Reservations []CartReservation `json:"reservations"`
}

// cartQueries are the cart mode's statements, schema spelled out.
type cartQueries struct {
	lockUser    string // the caller's advisory lock
	lockOptions string // the cart's options, locked in id order
	live        string // the caller's live reservations and each option's live sum
	insert      string // every line at once
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
	}
}

// reserveCart answers a reserve: 200 with the reservations, or the
// refusal's status and code.
func (s *Server) reserveCart(c *fiber.Ctx) error {
	user, err := caller(c)
	if err != nil {
		return answer(c, 0, nil, err)
	}
	items, err := readCart(user, c.Body())
	if err != nil {
		return answer(c, 0, nil, err)
	}
	lines, err := s.reserveItems(c.UserContext(), user, items)
	return answer(c, http.StatusOK, CartReply{Reservations: lines}, err)
}

// readCart validates a reserve's caller and body and returns its lines in
// option id order, the order they are locked in.
func readCart(user string, body []byte) ([]CartItem, error) {
	var req CartRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, domain.Invalid(`body must be {"userId": "...", "items": [{"productOptionId": 1, "quantity": 1}]}`)
	}
	if req.UserID != "" && req.UserID != user {
		return nil, domain.Invalid("userId %q is not the caller %q", req.UserID, user)
	}
	if len(req.Items) == 0 {
		return nil, domain.NewProblem(domain.CodeCartEmpty, "the cart is empty")
	}
	items := slices.Clone(req.Items)
	slices.SortFunc(items, func(a, b CartItem) int { return cmp.Compare(a.ProductOptionID, b.ProductOptionID) })
	for i, it := range items {
		if it.Quantity <= 0 || it.ProductOptionID <= 0 {
			return nil, domain.Invalid("each line needs a productOptionId and a positive quantity")
		}
		if i > 0 && items[i-1].ProductOptionID == it.ProductOptionID {
			return nil, domain.Invalid("product option %d is on two lines", it.ProductOptionID)
		}
	}
	return items, nil
}

// lockedOption is an option as the reserve's lock read it.
type lockedOption struct {
	name, code string
	stock      int
	active     bool
}

// reserveItems is the reserve's transaction: all of items reserved for
// user, or a refusal (*domain.Problem) and nothing.
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
			return nil, domain.NewProblem(domain.CodeInsufficientStock, "not enough available stock for product option %d",
				it.ProductOptionID).WithMeta("productOptionId", it.ProductOptionID)
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
			return nil, domain.NewProblem(domain.CodeOptionInactive, "the cart holds an inactive product option").WithMeta("productOptionId", id)
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
		return nil, domain.NewProblem(domain.CodeDuplicateReservation, "an order reservation is already in progress")
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
