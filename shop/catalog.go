package shop

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/storage"
)

// User is a shopper; a user's JWT sub is its userId.
type User struct {
	UserID    int64     `json:"userId"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
}

// Option is a product option with its stock.
type Option struct {
	ProductOptionID int64  `json:"productOptionId"`
	ProductID       int64  `json:"productId"`
	OptionCode      string `json:"optionCode"`
	Price           int64  `json:"price"`
	StockQuantity   int    `json:"stockQuantity"`
	IsActive        bool   `json:"isActive"`
}

// Product is a product and its options.
type Product struct {
	ProductID int64    `json:"productId"`
	Name      string   `json:"name"`
	Options   []Option `json:"options"`
}

// CartItem is one line of a cart.
type CartItem struct {
	ProductOptionID int64  `json:"productOptionId"`
	ProductName     string `json:"productName"`
	OptionCode      string `json:"optionCode"`
	Price           int64  `json:"price"`
	Quantity        int    `json:"quantity"`
}

// Stock is an option's stock as SPEC §5 defines availability.
type Stock struct {
	ProductOptionID  int64 `json:"productOptionId"`
	StockQuantity    int   `json:"stockQuantity"`
	ReservedQuantity int   `json:"reservedQuantity"`
	AvailableStock   int   `json:"availableStock"`
}

// Catalog is the Postgres side of the shop.
type Catalog struct {
	pool *pgxpool.Pool
}

// NewCatalog returns a Catalog on pool.
func NewCatalog(pool *pgxpool.Pool) *Catalog { return &Catalog{pool: pool} }

// UserID parses a JWT subject as a shop user id.
func UserID(sub string) (int64, bool) {
	id, err := strconv.ParseInt(sub, 10, 64)
	return id, err == nil && id > 0
}

func (c *Catalog) CreateUser(ctx context.Context, name string) (User, error) {
	u := User{Name: name}
	err := c.pool.QueryRow(ctx, `INSERT INTO users (name) VALUES ($1) RETURNING id, created_at`, name).Scan(&u.UserID, &u.CreatedAt)
	return u, storage.Translate("shop: create user", err)
}

// CreateProduct adds a product with its options and their stock.
func (c *Catalog) CreateProduct(ctx context.Context, p Product) (Product, error) {
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO products (name) VALUES ($1) RETURNING id`, p.Name).Scan(&p.ProductID); err != nil {
			return err
		}
		for i := range p.Options {
			o := &p.Options[i]
			o.ProductID = p.ProductID
			if err := tx.QueryRow(ctx, `INSERT INTO product_options (product_id, option_code, price, is_active)
				VALUES ($1, $2, $3, $4) RETURNING id`, p.ProductID, o.OptionCode, o.Price, o.IsActive).Scan(&o.ProductOptionID); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO inventory (product_option_id, stock_quantity) VALUES ($1, $2)`,
				o.ProductOptionID, o.StockQuantity); err != nil {
				return err
			}
		}
		return nil
	})
	return p, storage.Translate("shop: create product", err)
}

const optionColumns = `o.id, o.product_id, o.option_code, o.price, i.stock_quantity, o.is_active`

// PatchOption changes an option's active flag and/or its stock.
func (c *Catalog) PatchOption(ctx context.Context, id int64, active *bool, stock *int) (Option, error) {
	var o Option
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE product_options SET is_active = coalesce($2, is_active) WHERE id = $1`, id, active); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE inventory SET stock_quantity = coalesce($2, stock_quantity), updated_at = now()
			WHERE product_option_id = $1`, id, stock); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT `+optionColumns+` FROM product_options o JOIN inventory i ON i.product_option_id = o.id
			WHERE o.id = $1`, id).Scan(&o.ProductOptionID, &o.ProductID, &o.OptionCode, &o.Price, &o.StockQuantity, &o.IsActive)
	})
	return o, storage.Translate("shop: patch option", err)
}

// Stock reads an option's stock, reserved and available quantities now, by
// Postgres' clock (the one reservations' expiries are stamped with).
func (c *Catalog) Stock(ctx context.Context, id int64) (Stock, error) {
	s := Stock{ProductOptionID: id}
	err := c.pool.QueryRow(ctx, `SELECT i.stock_quantity, coalesce((SELECT sum(quantity) FROM inventory_reservations r
			WHERE r.product_option_id = i.product_option_id AND r.status = 'RESERVED' AND r.expires_at > now()), 0)
		FROM inventory i WHERE i.product_option_id = $1`, id).Scan(&s.StockQuantity, &s.ReservedQuantity)
	s.AvailableStock = domain.AvailableStock(s.StockQuantity, s.ReservedQuantity)
	return s, storage.Translate("shop: stock", err)
}

var errUserNotFound = domain.NewProblem(domain.CodeUserNotFound, "no such user")

func (c *Catalog) userExists(ctx context.Context, id int64) error {
	var ok bool
	if err := c.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM users WHERE id = $1)`, id).Scan(&ok); err != nil {
		return storage.Translate("shop: user", err)
	}
	if !ok {
		return errUserNotFound
	}
	return nil
}

// Cart lists a user's cart.
func (c *Catalog) Cart(ctx context.Context, userID int64) ([]CartItem, error) {
	if err := c.userExists(ctx, userID); err != nil {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, `SELECT o.id, p.name, o.option_code, o.price, ci.quantity
		FROM cart_items ci JOIN product_options o ON o.id = ci.product_option_id JOIN products p ON p.id = o.product_id
		WHERE ci.user_id = $1 ORDER BY o.id`, userID)
	if err != nil {
		return nil, storage.Translate("shop: cart", err)
	}
	items, err := pgx.CollectRows(rows, pgx.RowToStructByPos[CartItem])
	if items == nil {
		items = []CartItem{}
	}
	return items, storage.Translate("shop: cart", err)
}

// MaxCartItems is the most options a cart holds. A reserve names the
// user's key and one key per option (keysFor), and intake accepts at most
// requests.MaxKeys keys a request, since a drain must hold them all at once.
// Fifty lines is more than a checkout page shows. A full cart refuses another
// option with 409 CART_FULL; a line already in it still changes. A reserve of
// a cart over it is refused the same way before it is accepted: PUTs of new
// options at the same moment can each see room and leave a cart over it, as
// this count is not a lock.
const MaxCartItems = 50

var errCartFull = domain.NewProblem(domain.CodeCartFull,
	"the cart holds %d different options, the most it may; remove one first", MaxCartItems)

// SetCartItem sets a cart line's quantity; 0 removes it. A new option in a
// cart of MaxCartItems lines is refused (errCartFull); an option that does
// not exist is tried anyway, so that it is the foreign key's 404.
func (c *Catalog) SetCartItem(ctx context.Context, userID, optionID int64, qty int) error {
	if err := c.userExists(ctx, userID); err != nil {
		return err
	}
	if qty == 0 {
		_, err := c.pool.Exec(ctx, `DELETE FROM cart_items WHERE user_id = $1 AND product_option_id = $2`, userID, optionID)
		return storage.Translate("shop: set cart item", err)
	}
	tag, err := c.pool.Exec(ctx, `INSERT INTO cart_items (user_id, product_option_id, quantity)
		SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM cart_items WHERE user_id = $1 AND product_option_id = $2)
			OR (SELECT count(*) FROM cart_items WHERE user_id = $1) < $4
			OR NOT EXISTS (SELECT 1 FROM product_options WHERE id = $2)
		ON CONFLICT (user_id, product_option_id) DO UPDATE SET quantity = EXCLUDED.quantity`, userID, optionID, qty, MaxCartItems)
	if err == nil && tag.RowsAffected() == 0 {
		return errCartFull
	}
	return storage.Translate("shop: set cart item", err)
}

// cartSnapshots is what reserves cover: each user's cart when the API
// accepted the reserve, in option order, for several users in one statement;
// an empty cart is absent from the map.
func (c *Catalog) cartSnapshots(ctx context.Context, users []int64) (map[int64][]Line, error) {
	rows, err := c.pool.Query(ctx, `SELECT user_id, product_option_id, quantity FROM cart_items
		WHERE user_id = ANY($1) ORDER BY user_id, product_option_id`, users)
	if err != nil {
		return nil, storage.Translate("shop: cart snapshots", err)
	}
	carts := make(map[int64][]Line, len(users))
	var user int64
	var l Line
	_, err = pgx.ForEachRow(rows, []any{&user, &l.ProductOptionID, &l.Quantity}, func() error {
		carts[user] = append(carts[user], l)
		return nil
	})
	return carts, storage.Translate("shop: cart snapshots", err)
}

// ExpireReservations marks RESERVED rows past their expiry EXPIRED: state
// tidy-up only, since availability already ignores them (SPEC §7). Past
// their expiry by Postgres' clock, the one a reserve's batch stamped it
// with: a worker whose clock ran ahead would otherwise take a reservation
// away that its owner may still confirm.
func (c *Catalog) ExpireReservations(ctx context.Context) (int64, error) {
	tag, err := c.pool.Exec(ctx, `UPDATE inventory_reservations SET status = 'EXPIRED', updated_at = now()
		WHERE status = 'RESERVED' AND expires_at <= now()`)
	if err != nil {
		return 0, fmt.Errorf("shop: expire reservations: %w", err)
	}
	return tag.RowsAffected(), nil
}
