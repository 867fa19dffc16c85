package events

import (
	"encoding/json"
	"slices"

	"github.com/gofiber/fiber/v2"

	"github.com/holdfast/holdfast/api"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/requests"
)

// maxPaymentReference bounds a confirmation's payment reference.
const maxPaymentReference = 100

// hold accepts a request for seats: seatIds, or a quantity of
// best-available seats (in a section), side by side unless apart. The
// caller needs an entry token when the event requires one for booking.
func (h *handlers) hold(c *fiber.Ctx) error {
	e, err := h.event(c)
	if err != nil {
		return err
	}
	var in struct {
		SeatIDs  []int64 `json:"seatIds"`
		Section  *string `json:"section"`
		Quantity *int    `json:"quantity"`
		Apart    bool    `json:"apart"`
	}
	if err := api.Decode(c, &in); err != nil {
		return err
	}
	p := HoldPayload{EventID: e.EventID, SeatIDs: in.SeatIDs, Apart: in.Apart}
	switch {
	case (in.SeatIDs != nil) == (in.Quantity != nil):
		return api.InvalidField("quantity", "send seatIds, or a quantity of best-available seats")
	case in.SeatIDs != nil && in.Section != nil:
		return api.InvalidField("section", "a section goes with a quantity, not with seatIds")
	case in.Quantity != nil && (*in.Quantity < 1 || *in.Quantity > e.MaxSeatsPerUser):
		return api.InvalidField("quantity", "quantity must be between 1 and %d", e.MaxSeatsPerUser)
	case in.SeatIDs != nil && (len(in.SeatIDs) == 0 || len(in.SeatIDs) > e.MaxSeatsPerUser):
		return api.InvalidField("seatIds", "name 1 to %d seats", e.MaxSeatsPerUser)
	case in.SeatIDs != nil && len(slices.Compact(slices.Sorted(slices.Values(in.SeatIDs)))) != len(in.SeatIDs):
		return api.InvalidField("seatIds", "a seat is named twice")
	}
	if in.Quantity != nil {
		p.Quantity = *in.Quantity
	}
	if in.Section != nil {
		p.Section = *in.Section
		if p.Section == "" {
			return api.InvalidField("section", "a section has a name")
		}
	}
	if e.EntryTokenRequired {
		if err := h.requireEntry(c, e); err != nil {
			return err
		}
	}
	seatsOK, sectionOK, err := h.catalog.SeatsOf(c.UserContext(), e.EventID, p.SeatIDs, p.Section)
	switch {
	case err != nil:
		return err
	case !seatsOK:
		return domain.NewProblem(domain.CodeNotFound, "a seat named is not a seat of event %d", e.EventID)
	case !sectionOK:
		return domain.NewProblem(domain.CodeNotFound, "event %d has no section %q", e.EventID, p.Section)
	}
	return h.submitHold(c, TypeSeatHold, e.EventID, p)
}

// confirmHold accepts the confirmation of a hold with its payment
// reference; the same reference again gets the same order.
func (h *handlers) confirmHold(c *fiber.Ctx) error {
	var in struct {
		PaymentReference string `json:"paymentReference"`
	}
	if err := api.Decode(c, &in); err != nil {
		return err
	}
	if in.PaymentReference == "" || len(in.PaymentReference) > maxPaymentReference {
		return api.InvalidField("paymentReference", "paymentReference is 1 to %d characters", maxPaymentReference)
	}
	return h.holdAction(c, TypeHoldConfirm, in.PaymentReference)
}

// releaseHold accepts giving a hold's seats back.
func (h *handlers) releaseHold(c *fiber.Ctx) error { return h.holdAction(c, TypeHoldRelease, "") }

func (h *handlers) holdAction(c *fiber.Ctx, typ, payment string) error {
	e, err := h.event(c)
	if err != nil {
		return err
	}
	id, err := api.PathID(c, "holdId")
	if err != nil {
		return err
	}
	return h.submitHold(c, typ, e.EventID, HoldActionPayload{EventID: e.EventID, HoldID: id, PaymentReference: payment})
}

func (h *handlers) submitHold(c *fiber.Ctx, typ string, ev int64, payload any) error {
	body, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	return h.writes.Accept(c, requests.Submission{Type: typ, Queue: Queue, Keys: []string{EventKey(ev)}, Payload: body})
}

// holds lists the caller's holds of the event.
func (h *handlers) holds(c *fiber.Ctx) error {
	e, err := h.event(c)
	if err != nil {
		return err
	}
	holds, err := h.catalog.Holds(c.UserContext(), e.EventID, api.Principal(c).UserID)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"items": holds})
}
