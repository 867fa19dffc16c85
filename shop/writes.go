package shop

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/requests"
)

// Task types and queue of shop writes.
const (
	Queue       = "shop"
	TypeReserve = "order.reserve"
	TypeConfirm = "order.confirm"
	TypeRelease = "order.release"
)

// UserKey and OptionKey are the serialization keys of the shop.
func UserKey(id int64) string   { return "shop:user:" + strconv.FormatInt(id, 10) }
func OptionKey(id int64) string { return "shop:opt:" + strconv.FormatInt(id, 10) }

// Line is a quantity of one option.
type Line struct {
	ProductOptionID int64 `json:"productOptionId"`
	Quantity        int   `json:"quantity"`
}

// ReservePayload is an order.reserve request: the cart when it was accepted.
type ReservePayload struct {
	UserID int64  `json:"userId"`
	Items  []Line `json:"items"`
}

// ConfirmPayload is an order.confirm request: it confirms the user's latest
// reservation as it stands when the request is applied.
type ConfirmPayload struct {
	UserID int64 `json:"userId"`
}

// ReleasePayload is an order.release request.
type ReleasePayload struct {
	UserID int64 `json:"userId"`
}

// Reservation is one reserved line (seed 002 §2 response).
type Reservation struct {
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

// Order is a confirmed checkout.
type Order struct {
	OrderID   int64       `json:"orderId"`
	UserID    int64       `json:"userId"`
	Lines     []OrderLine `json:"lines"`
	Total     int64       `json:"total"`
	CreatedAt time.Time   `json:"createdAt"`
}

// OrderLine is one line of an order.
type OrderLine struct {
	ProductOptionID int64 `json:"productOptionId"`
	Quantity        int   `json:"quantity"`
	UnitPrice       int64 `json:"unitPrice"`
	LineTotal       int64 `json:"lineTotal"`
}

// Writes applies shop writes in the worker.
type Writes struct {
	// TTL is how long a reservation holds stock (RESERVATION_TTL, 30 min).
	TTL time.Duration
}

// Types are the shop write types for the worker.
func (w *Writes) Types() []keyed.Type {
	return []keyed.Type{
		{Name: TypeReserve, Queue: Queue, Applier: keyed.ApplierFunc(w.reserveBatch)},
		{Name: TypeConfirm, Queue: Queue, Applier: keyed.Each(keyed.Plain, w.confirm)},
		{Name: TypeRelease, Queue: Queue, Applier: keyed.Each(keyed.Plain, w.release)},
	}
}

type optionRow struct {
	id        int64
	product   string
	code      string
	price     int64
	active    bool
	available int
}

// confirm deducts real stock once, marks the reservation CONFIRMED and
// creates the order. It holds only the user's key: confirming leaves every
// option's available stock unchanged (stock and reserved both drop by the
// quantity), and the stock rows are locked while they are deducted.
func (w *Writes) confirm(ctx context.Context, tx pgx.Tx, b *keyed.Batch, _ *requests.Request, p *ConfirmPayload) (requests.Outcome, error) {
	r, err := latestReservation(ctx, tx, p.UserID, b.Now)
	if err != nil {
		return requests.Outcome{}, err
	}
	if len(r.ids) == 0 || r.used {
		return requests.Reject(domain.CodeReservationNotFound, "no order reservation to confirm"), nil
	}
	if r.expired {
		if _, err := tx.Exec(ctx, `UPDATE inventory_reservations SET status = 'EXPIRED', updated_at = $2
			WHERE id = ANY($1) AND status = 'RESERVED'`, r.ids, b.Now); err != nil {
			return requests.Outcome{}, err
		}
		return requests.Reject(domain.CodeReservationExpired, "the order reservation has expired"), nil
	}
	// Check every line before changing anything, so a refusal leaves no trace.
	optionIDs := make([]int64, len(r.order.Lines))
	for i, l := range r.order.Lines {
		optionIDs[i] = l.ProductOptionID
	}
	stock, err := lockStock(ctx, tx, optionIDs)
	if err != nil {
		return requests.Outcome{}, err
	}
	for _, l := range r.order.Lines {
		if stock[l.ProductOptionID] < l.Quantity { // stock was lowered below what was reserved
			return requests.Rejected(domain.NewProblem(domain.CodeInsufficientStock,
				"stock of product option %d fell below the reservation", l.ProductOptionID).
				WithMeta("productOptionId", l.ProductOptionID)), nil
		}
		stock[l.ProductOptionID] -= l.Quantity
	}
	if err := placeOrder(ctx, tx, &r.order, r.ids, optionIDs, b.Now); err != nil {
		return requests.Outcome{}, err
	}
	return requests.Succeeded(r.order), nil
}

// reservation is a user's latest reservation, as confirm reads it: the
// order it would make, its rows, and whether any of them lapsed or was
// used already.
type reservation struct {
	order         Order
	ids           []int64
	expired, used bool
}

// latestReservation locks the rows of the user's newest reserve.
func latestReservation(ctx context.Context, tx pgx.Tx, userID int64, now time.Time) (reservation, error) {
	r := reservation{order: Order{UserID: userID, CreatedAt: now.UTC()}}
	rows, err := tx.Query(ctx, `SELECT r.id, r.product_option_id, r.quantity, r.status, r.expires_at, o.price
		FROM inventory_reservations r JOIN product_options o ON o.id = r.product_option_id
		WHERE r.user_id = $1 AND r.reserved_at = (SELECT max(reserved_at) FROM inventory_reservations WHERE user_id = $1)
		ORDER BY r.product_option_id FOR UPDATE OF r`, userID)
	if err != nil {
		return r, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var l OrderLine
		var status string
		var expiresAt time.Time
		if err := rows.Scan(&id, &l.ProductOptionID, &l.Quantity, &status, &expiresAt, &l.UnitPrice); err != nil {
			return r, err
		}
		r.ids = append(r.ids, id)
		switch {
		case status == "EXPIRED" || (status == "RESERVED" && !expiresAt.After(now)):
			r.expired = true
		case status != "RESERVED": // confirmed or released already
			r.used = true
		}
		l.LineTotal = l.UnitPrice * int64(l.Quantity)
		r.order.Total += l.LineTotal
		r.order.Lines = append(r.order.Lines, l)
	}
	return r, rows.Err()
}

// lockStock locks the options' inventory rows and returns their stock.
func lockStock(ctx context.Context, tx pgx.Tx, optionIDs []int64) (map[int64]int, error) {
	stock := map[int64]int{}
	rows, err := tx.Query(ctx, `SELECT product_option_id, stock_quantity FROM inventory
		WHERE product_option_id = ANY($1) ORDER BY product_option_id FOR UPDATE`, optionIDs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var q int
		if err := rows.Scan(&id, &q); err != nil {
			return nil, err
		}
		stock[id] += q
	}
	return stock, rows.Err()
}

// placeOrder takes the order's stock, stores it with its lines, marks its
// reservation rows confirmed and takes what was ordered out of the cart.
func placeOrder(ctx context.Context, tx pgx.Tx, order *Order, ids, optionIDs []int64, now time.Time) error {
	if _, err := tx.Exec(ctx, `UPDATE inventory i SET stock_quantity = i.stock_quantity - d.q, updated_at = $3
		FROM unnest($1::bigint[], $2::int[]) AS d(id, q) WHERE i.product_option_id = d.id`,
		optionIDs, quantities(order.Lines), now); err != nil {
		return err
	}
	if err := tx.QueryRow(ctx, `INSERT INTO orders (user_id, total, created_at) VALUES ($1, $2, $3) RETURNING id`,
		order.UserID, order.Total, now).Scan(&order.OrderID); err != nil {
		return err
	}
	for _, l := range order.Lines {
		if _, err := tx.Exec(ctx, `INSERT INTO order_lines (order_id, product_option_id, quantity, unit_price)
			VALUES ($1, $2, $3, $4)`, order.OrderID, l.ProductOptionID, l.Quantity, l.UnitPrice); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE inventory_reservations SET status = 'CONFIRMED', order_id = $2, updated_at = $3
		WHERE id = ANY($1)`, ids, order.OrderID, now); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `DELETE FROM cart_items WHERE user_id = $1 AND product_option_id = ANY($2)`,
		order.UserID, optionIDs)
	return err
}

// release gives the user's active reservation back; releasing nothing is a
// success too.
func (w *Writes) release(ctx context.Context, tx pgx.Tx, b *keyed.Batch, _ *requests.Request, p *ReleasePayload) (requests.Outcome, error) {
	tag, err := tx.Exec(ctx, `UPDATE inventory_reservations SET status = 'RELEASED', updated_at = $2
		WHERE user_id = $1 AND status = 'RESERVED' AND expires_at > $2`, p.UserID, b.Now)
	if err != nil {
		return requests.Outcome{}, err
	}
	return requests.Succeeded(map[string]any{"released": tag.RowsAffected()}), nil
}

func quantities(lines []OrderLine) []int32 {
	out := make([]int32, len(lines))
	for i, l := range lines {
		out[i] = int32(l.Quantity)
	}
	return out
}

// keysFor are a write's serialization keys.
func keysFor(user int64, options []int64) []string {
	keys := []string{UserKey(user)}
	for _, o := range slices.Compact(slices.Sorted(slices.Values(options))) {
		keys = append(keys, OptionKey(o))
	}
	return keys
}
