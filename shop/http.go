package shop

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/api"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/storage"
)

// Deps are what the shop routes use.
type Deps struct {
	Pool *pgxpool.Pool
	// Writes accepts the reserve, confirm and release writes.
	Writes api.Writes
	// CartGroupRead reads the carts of concurrent reserves together
	// (CART_GROUP_READ), each read bounded by DependencyTimeout.
	CartGroupRead     bool
	DependencyTimeout time.Duration
}

// Mount adds the shop routes to v1 (api.Server.V1).
func Mount(v1 fiber.Router, d Deps) {
	d.Writes.DeclareWrites(Queue, TypeReserve, TypeConfirm, TypeRelease)
	h := &handlers{catalog: NewCatalog(d.Pool), writes: d.Writes}
	h.readCart = func(ctx context.Context, user int64) ([]Line, error) {
		carts, err := h.catalog.cartSnapshots(ctx, []int64{user})
		return carts[user], err
	}
	if d.CartGroupRead {
		// In the cart rush (3,000 reserves, 200 clients, A/B pairs, docs/benchmarks.md,
		// four pairs): 3,131–3,927 → 3,990–4,511 reserves/s, 0.43–0.52
		// → 0.32–0.40 ms of CPU a reserve (Postgres 0.14–0.15 → 0.09–0.12).
		carts := storage.NewGroupRead(h.catalog.cartSnapshots, maxCartsARead, d.DependencyTimeout)
		h.readCart = carts.Get
	}
	admin := api.RequireRole(domain.RoleAdmin)
	v1.Post("/users", admin, h.createUser)
	v1.Post("/products", admin, h.createProduct)
	v1.Patch("/product-options/:productOptionId", admin, h.patchOption)
	v1.Get("/product-options/:productOptionId/stock", h.stock)
	v1.Get("/cart", h.cart)
	v1.Put("/cart/items/:productOptionId", h.setCartItem)
	v1.Post("/orders/reserve", h.reserve)
	v1.Post("/orders", h.confirm)
	v1.Delete("/orders/reserve", h.release)
}

type handlers struct {
	catalog *Catalog
	writes  api.Writes
	// readCart reads the cart a reserve covers, alone or with the carts of
	// concurrent reserves (CART_GROUP_READ).
	readCart func(ctx context.Context, user int64) ([]Line, error)
}

// maxCartsARead bounds the carts one grouped read asks for.
const maxCartsARead = 256

func (h *handlers) createUser(c *fiber.Ctx) error {
	var in struct {
		Name string `json:"name"`
	}
	if err := api.Decode(c, &in); err != nil {
		return err
	}
	if err := api.RequireName("name", in.Name); err != nil {
		return err
	}
	u, err := h.catalog.CreateUser(c.UserContext(), in.Name)
	if err != nil {
		return err
	}
	return c.Status(http.StatusCreated).JSON(u)
}

func (h *handlers) createProduct(c *fiber.Ctx) error {
	var in struct {
		Name    string `json:"name"`
		Options []struct {
			OptionCode    string `json:"optionCode"`
			Price         int64  `json:"price"`
			StockQuantity int    `json:"stockQuantity"`
			IsActive      *bool  `json:"isActive"`
		} `json:"options"`
	}
	if err := api.Decode(c, &in); err != nil {
		return err
	}
	if err := api.RequireName("name", in.Name); err != nil {
		return err
	}
	if len(in.Options) == 0 || len(in.Options) > 50 {
		return api.InvalidField("options", "a product has 1 to 50 options")
	}
	p := Product{Name: in.Name}
	for _, o := range in.Options {
		if strings.TrimSpace(o.OptionCode) == "" || len(o.OptionCode) > 64 {
			return api.InvalidField("optionCode", "optionCode must be 1 to 64 characters")
		}
		if o.Price < 0 || o.Price > 1_000_000_000_000 || o.StockQuantity < 0 || o.StockQuantity > 1_000_000_000 {
			return api.InvalidField("options", "price (at most 10^12) and stockQuantity must not be negative")
		}
		p.Options = append(p.Options, Option{OptionCode: o.OptionCode, Price: o.Price,
			StockQuantity: o.StockQuantity, IsActive: o.IsActive == nil || *o.IsActive})
	}
	p, err := h.catalog.CreateProduct(c.UserContext(), p)
	if err != nil {
		return err
	}
	return c.Status(http.StatusCreated).JSON(p)
}

func (h *handlers) patchOption(c *fiber.Ctx) error {
	id, err := api.PathID(c, "productOptionId")
	if err != nil {
		return err
	}
	var in struct {
		IsActive      *bool `json:"isActive"`
		StockQuantity *int  `json:"stockQuantity"`
	}
	if err := api.Decode(c, &in); err != nil {
		return err
	}
	if in.IsActive == nil && in.StockQuantity == nil {
		return api.InvalidField("isActive", "send isActive and/or stockQuantity")
	}
	if in.StockQuantity != nil && (*in.StockQuantity < 0 || *in.StockQuantity > 1_000_000_000) {
		return api.InvalidField("stockQuantity", "stockQuantity must not be negative")
	}
	o, err := h.catalog.PatchOption(c.UserContext(), id, in.IsActive, in.StockQuantity)
	if err != nil {
		return err
	}
	return c.JSON(o)
}

func (h *handlers) stock(c *fiber.Ctx) error {
	id, err := api.PathID(c, "productOptionId")
	if err != nil {
		return err
	}
	st, err := h.catalog.Stock(c.UserContext(), id)
	if err != nil {
		return err
	}
	return c.JSON(st)
}

// caller is the shop user the principal acts as: its own id, or for staff
// and admins the userId given.
func caller(c *fiber.Ctx, bodyUserID int64) (int64, error) {
	p := api.Principal(c)
	if bodyUserID != 0 && p.Role.Privileged() {
		return bodyUserID, nil
	}
	id, ok := UserID(p.UserID)
	if bodyUserID != 0 && (!ok || bodyUserID != id) {
		return 0, domain.NewProblem(domain.CodeForbidden, "you may only act as yourself")
	}
	if !ok {
		return 0, errUserNotFound
	}
	return id, nil
}

func (h *handlers) cart(c *fiber.Ctx) error {
	user, err := caller(c, 0)
	if err != nil {
		return err
	}
	items, err := h.catalog.Cart(c.UserContext(), user)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"userId": user, "items": items})
}

func (h *handlers) setCartItem(c *fiber.Ctx) error {
	option, err := api.PathID(c, "productOptionId")
	if err != nil {
		return err
	}
	var in struct {
		Quantity *int `json:"quantity"`
	}
	if err := api.Decode(c, &in); err != nil {
		return err
	}
	if in.Quantity == nil || *in.Quantity < 0 || *in.Quantity > 999 {
		return api.InvalidField("quantity", "quantity must be between 0 and 999 (0 removes the item)")
	}
	user, err := caller(c, 0)
	if err != nil {
		return err
	}
	if err := h.catalog.SetCartItem(c.UserContext(), user, option, *in.Quantity); err != nil {
		return err
	}
	return h.cart(c)
}

// decodeUser reads the optional {"userId"} body of the order routes.
func decodeUser(c *fiber.Ctx) (int64, error) {
	var in struct {
		UserID *int64 `json:"userId"`
	}
	if err := api.Decode(c, &in); err != nil {
		return 0, err
	}
	if in.UserID != nil && *in.UserID <= 0 {
		return 0, api.InvalidField("userId", "userId must be a positive integer")
	}
	var id int64
	if in.UserID != nil {
		id = *in.UserID
	}
	return caller(c, id)
}

func (h *handlers) accept(c *fiber.Ctx, typ string, user int64, options []int64, payload any) error {
	body, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	return h.writes.Accept(c, requests.Submission{Type: typ, Queue: Queue, UserID: api.Principal(c).UserID,
		Keys: keysFor(user, options), Payload: body})
}

func (h *handlers) reserve(c *fiber.Ctx) error {
	user, err := decodeUser(c)
	if err != nil {
		return err
	}
	items, err := h.readCart(c.UserContext(), user)
	if err != nil {
		return err
	}
	if len(items) > MaxCartItems {
		return errCartFull
	}
	options := make([]int64, len(items))
	for i, l := range items {
		options[i] = l.ProductOptionID
	}
	if items == nil {
		items = []Line{}
	}
	return h.accept(c, TypeReserve, user, options, ReservePayload{UserID: user, Items: items})
}

func (h *handlers) confirm(c *fiber.Ctx) error {
	user, err := decodeUser(c)
	if err != nil {
		return err
	}
	return h.accept(c, TypeConfirm, user, nil, ConfirmPayload{UserID: user})
}

func (h *handlers) release(c *fiber.Ctx) error {
	user, err := decodeUser(c)
	if err != nil {
		return err
	}
	return h.accept(c, TypeRelease, user, nil, ReleasePayload{UserID: user})
}
