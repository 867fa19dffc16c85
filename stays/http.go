package stays

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/api"
	"github.com/holdfast/holdfast/domain"
)

// Deps are what the stays routes use.
type Deps struct {
	Pool  *pgxpool.Pool         // the catalog and the availability reads
	Redis redis.UniversalClient // holds
	// Writes accepts the hold writes.
	Writes api.Writes
	// PublicLimit guards the public availability (api.Limits.Public).
	PublicLimit fiber.Handler
}

// Mount adds the stays routes to v1 (api.Server.V1): catalog and
// reservations (staff/admin), availability, and holds.
func Mount(v1 fiber.Router, d Deps) {
	d.Writes.DeclareWrites(Queue, TypeHoldCreate, TypeHoldConfirm, TypeHoldCancel)
	h := &handlers{catalog: NewCatalog(d.Pool), holds: NewHoldStore(d.Redis), writes: d.Writes}
	staff := api.RequireRole(domain.RoleStaff, domain.RoleAdmin)
	v1.Post("/hotels", staff, h.createHotel)
	v1.Patch("/hotels/:hotelId", staff, h.patchHotel)
	v1.Post("/hotels/:hotelId/room-types", staff, h.createRoomType)
	v1.Patch("/room-types/:roomTypeId", staff, h.patchRoomType)
	v1.Post("/hotels/:hotelId/rooms", staff, h.createRoom)
	v1.Patch("/rooms/:roomId", staff, h.patchRoom)
	v1.Get("/hotels/:hotelId/reservations", staff, h.listReservations)
	for _, action := range []string{"check-in", "check-out", "cancel"} {
		v1.Post("/reservations/:reservationId/"+action, staff, h.transition(action))
	}
	h.mountHolds(v1)
	h.mountAvailability(v1, NewAvailability(d.Pool, h.holds), d.PublicLimit)
}

// handlers are the stays routes, with what they share.
type handlers struct {
	catalog *Catalog
	holds   *HoldStore
	writes  api.Writes
}

var currencyPattern = regexp.MustCompile(`^[A-Z]{3}$`)

func oneOf(field, v string, allowed ...string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return api.InvalidField(field, "%s must be one of %s", field, strings.Join(allowed, ", "))
}

func (h *handlers) createHotel(c *fiber.Ctx) error {
	var in struct {
		Name     string `json:"name"`
		Timezone string `json:"timezone"`
		Currency string `json:"currency"`
	}
	if err := api.Decode(c, &in); err != nil {
		return err
	}
	if err := api.RequireName("name", in.Name); err != nil {
		return err
	}
	if _, err := time.LoadLocation(in.Timezone); err != nil || in.Timezone == "" {
		return api.InvalidField("timezone", "timezone must be an IANA time zone such as Asia/Seoul")
	}
	if !currencyPattern.MatchString(in.Currency) {
		return api.InvalidField("currency", "currency must be an ISO 4217 code such as KRW")
	}
	hotel, err := h.catalog.CreateHotel(c.UserContext(), Hotel{Name: in.Name, Timezone: in.Timezone, Currency: in.Currency})
	if err != nil {
		return err
	}
	return c.Status(http.StatusCreated).JSON(hotel)
}

func decodeStatus(c *fiber.Ctx, allowed ...string) (string, error) {
	var in struct {
		Status string `json:"status"`
	}
	if err := api.Decode(c, &in); err != nil {
		return "", err
	}
	return in.Status, oneOf("status", in.Status, allowed...)
}

func (h *handlers) patchHotel(c *fiber.Ctx) error {
	id, err := api.PathID(c, "hotelId")
	if err != nil {
		return err
	}
	status, err := decodeStatus(c, domain.StatusActive, domain.StatusInactive)
	if err != nil {
		return err
	}
	hotel, err := h.catalog.SetHotelStatus(c.UserContext(), id, status)
	if err != nil {
		return err
	}
	return c.JSON(hotel)
}

func (h *handlers) createRoomType(c *fiber.Ctx) error {
	hotelID, err := api.PathID(c, "hotelId")
	if err != nil {
		return err
	}
	var in struct {
		Name string `json:"name"`
	}
	if err := api.Decode(c, &in); err != nil {
		return err
	}
	if err := api.RequireName("name", in.Name); err != nil {
		return err
	}
	rt, err := h.catalog.CreateRoomType(c.UserContext(), RoomType{HotelID: hotelID, Name: in.Name})
	if err != nil {
		return err
	}
	return c.Status(http.StatusCreated).JSON(rt)
}

func (h *handlers) patchRoomType(c *fiber.Ctx) error {
	id, err := api.PathID(c, "roomTypeId")
	if err != nil {
		return err
	}
	status, err := decodeStatus(c, domain.StatusActive, domain.StatusInactive)
	if err != nil {
		return err
	}
	rt, err := h.catalog.SetRoomTypeStatus(c.UserContext(), id, status)
	if err != nil {
		return err
	}
	return c.JSON(rt)
}

func (h *handlers) createRoom(c *fiber.Ctx) error {
	hotelID, err := api.PathID(c, "hotelId")
	if err != nil {
		return err
	}
	var in struct {
		RoomTypeID int64  `json:"roomTypeId"`
		Number     string `json:"number"`
	}
	if err := api.Decode(c, &in); err != nil {
		return err
	}
	if in.RoomTypeID <= 0 {
		return api.InvalidField("roomTypeId", "roomTypeId is required")
	}
	if strings.TrimSpace(in.Number) == "" || len(in.Number) > 32 {
		return api.InvalidField("number", "number must be 1 to 32 characters")
	}
	room, err := h.catalog.CreateRoom(c.UserContext(), Room{HotelID: hotelID, RoomTypeID: in.RoomTypeID, Number: in.Number})
	if err != nil {
		return err
	}
	return c.Status(http.StatusCreated).JSON(room)
}

func (h *handlers) patchRoom(c *fiber.Ctx) error {
	id, err := api.PathID(c, "roomId")
	if err != nil {
		return err
	}
	var in struct {
		Status             *string `json:"status"`
		HousekeepingStatus *string `json:"housekeepingStatus"`
	}
	if err := api.Decode(c, &in); err != nil {
		return err
	}
	if in.Status == nil && in.HousekeepingStatus == nil {
		return api.InvalidField("status", "send status and/or housekeepingStatus")
	}
	if in.Status != nil {
		if err := oneOf("status", *in.Status, domain.StatusActive, domain.StatusInactive, domain.StatusOutOfService); err != nil {
			return err
		}
	}
	if in.HousekeepingStatus != nil {
		if err := oneOf("housekeepingStatus", *in.HousekeepingStatus, domain.HousekeepingClean, domain.HousekeepingDirty); err != nil {
			return err
		}
	}
	room, err := h.catalog.PatchRoom(c.UserContext(), id, in.Status, in.HousekeepingStatus)
	if err != nil {
		return err
	}
	return c.JSON(room)
}

func (h *handlers) listReservations(c *fiber.Ctx) error {
	hotelID, err := api.PathID(c, "hotelId")
	if err != nil {
		return err
	}
	if _, err := h.catalog.Hotel(c.UserContext(), hotelID); err != nil {
		return err
	}
	status := c.Query("status")
	if status != "" {
		if err := oneOf("status", status, domain.StayPending, domain.StayConfirmed, domain.StayCheckedIn,
			domain.StayCancelled, domain.StayCheckedOut); err != nil {
			return domain.NewProblem(domain.CodeInvalidFilter, "%s", err.Error())
		}
	}
	limit := 100
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return api.InvalidField("limit", "limit must be between 1 and 1000")
		}
		limit = n
	}
	items, err := h.catalog.Reservations(c.UserContext(), hotelID, status, limit)
	if err != nil {
		return err
	}
	if items == nil {
		items = []Reservation{}
	}
	return c.JSON(fiber.Map{"items": items})
}

func (h *handlers) transition(action string) fiber.Handler {
	return func(c *fiber.Ctx) error {
		id, err := api.PathID(c, "reservationId")
		if err != nil {
			return err
		}
		r, err := h.catalog.Transition(c.UserContext(), id, action)
		if err != nil {
			return err
		}
		return c.JSON(r)
	}
}
