package stays

import (
	"encoding/json"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"

	"github.com/holdfast/holdfast/api"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/requests"
)

func (h *handlers) mountHolds(v1 fiber.Router) {
	v1.Post("/holds", h.createHold)
	v1.Post("/holds/:holdId/confirm", func(c *fiber.Ctx) error { return h.holdWrite(c, TypeHoldConfirm) })
	v1.Delete("/holds/:holdId", func(c *fiber.Ctx) error { return h.holdWrite(c, TypeHoldCancel) })
	v1.Get("/holds/:holdId", h.getHold)
}

func (h *handlers) createHold(c *fiber.Ctx) error {
	var p CreatePayload
	if err := api.Decode(c, &p); err != nil {
		return err
	}
	if p.RoomTypeID <= 0 {
		return api.InvalidField("roomTypeId", "roomTypeId is required")
	}
	dr, err := domain.ParseDateRange(p.CheckIn, p.CheckOut)
	if err != nil {
		return err
	}
	if dr.From.Before(time.Now().UTC().AddDate(0, 0, -1).Truncate(24 * time.Hour)) {
		return domain.NewProblem(domain.CodeInvalidDateRange, "checkIn is in the past")
	}
	if _, err := uuid.Parse(p.ClientHoldKey); err != nil || len(p.ClientHoldKey) != 36 {
		return api.InvalidField("clientHoldKey", "clientHoldKey must be a UUID")
	}
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return h.writes.Accept(c, requests.Submission{Type: TypeHoldCreate, Queue: Queue,
		Keys: []string{SerialKey(p.RoomTypeID)}, Payload: body})
}

func (h *handlers) holdWrite(c *fiber.Ctx, typ string) error {
	id := c.Params("holdId")
	rt, ok := ParseHoldID(id)
	if !ok {
		return domain.NewProblem(domain.CodeNotFound, "no such hold")
	}
	if len(c.Body()) > 0 {
		if err := api.Decode(c, &struct{}{}); err != nil {
			return err
		}
	}
	body, err := json.Marshal(HoldPayload{HoldID: id, Staff: api.Principal(c).Role.Privileged()})
	if err != nil {
		return err
	}
	return h.writes.Accept(c, requests.Submission{Type: typ, Queue: Queue, Keys: []string{SerialKey(rt)}, Payload: body})
}

func (h *handlers) getHold(c *fiber.Ctx) error {
	hold, err := h.holds.Get(c.UserContext(), c.Params("holdId"), time.Now())
	if err != nil {
		return err
	}
	if hold == nil {
		return domain.NewProblem(domain.CodeNotFound, "no such hold, or it has expired")
	}
	if !api.Principal(c).CanActFor(hold.UserID) {
		return domain.NewProblem(domain.CodeForbidden, "this hold belongs to another user")
	}
	return c.JSON(hold)
}
