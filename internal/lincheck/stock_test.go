package lincheck

import (
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/holdfast/holdfast/domain"
)

const opt = "shop:opt:1"

func level(stock, reserved int) Outcome {
	return OK(StockLevel{Stock: stock, Reserved: reserved, Available: stock - reserved})
}

// The stock model accepts a correct history, and the documented double
// count of a confirm inside a reserve; it rejects each broken history: a
// checker that accepts everything fails here.
func TestStockControls(t *testing.T) {
	insufficient := Refused(domain.CodeInsufficientStock, nil)
	runControls(t, Stock(map[string]int{opt: 3, opt + "b": 6}), []control{
		{"a correct history", func(h history) {
			h.op(0, opt, 0, 10, Reserve{"u1", 2}, OK(1)).
				op(1, opt, 5, 15, Reserve{"u2", 2}, insufficient). // concurrent: placed after u1's
				op(2, opt, 1, 2, Reserve{"u3", 3}, NotAccepted(domain.CodeUnavailable)).
				op(2, opt, 20, 25, ReadStock{}, level(3, 2)).
				op(0, opt, 21, 24, Reserve{"u1", 1}, Refused(domain.CodeDuplicateReservation, nil)).
				op(0, opt, 30, 40, Confirm{"u1"}, OK(2)).
				op(1, opt, 45, 50, ReadStock{}, level(1, 0)).
				op(1, opt, 55, 60, Reserve{"u2", 1}, OK(0)).
				op(2, opt, 56, 59, Confirm{"u3"}, Refused(domain.CodeReservationNotFound, nil)).
				op(1, opt, 65, 70, Release{"u2"}, OK(1)).
				op(1, opt, 75, 80, Release{"u2"}, OK(0)).
				op(2, opt, 85, 90, ReadStock{}, level(1, 0))
		}, porcupine.Ok},
		{"a reserve whose outcome was never learnt, seen by a later read", func(h history) {
			h.op(0, opt, 0, 0, Reserve{"u1", 2}, Unknown()).
				op(1, opt, 10, 20, ReadStock{}, level(3, 2))
		}, porcupine.Ok},
		{"the documented boundary refusal: a confirm inside the reserve", func(h history) {
			h.op(0, opt, 0, 5, Reserve{"u1", 2}, OK(1)).
				op(0, opt, 10, 30, Confirm{"u1"}, OK(2)).
				op(1, opt, 12, 28, Reserve{"u2", 1}, insufficient)
		}, porcupine.Ok},

		{"a reserve across two confirms and a read between them", func(h history) {
			// u3's reserve read the reserved units before both confirms
			// and the stock after both: it saw 3 − 3 = 0 available of 3.
			h.op(0, opt+"b", 0, 5, Reserve{"u1", 2}, OK(4)).
				op(1, opt+"b", 0, 5, Reserve{"u2", 1}, OK(3)).
				op(0, opt+"b", 10, 20, Confirm{"u1"}, OK(2)).
				op(2, opt+"b", 21, 22, ReadStock{}, level(4, 1)).
				op(1, opt+"b", 10, 30, Confirm{"u2"}, OK(1)).
				op(3, opt+"b", 8, 40, Reserve{"u3", 3}, insufficient).
				op(2, opt+"b", 45, 50, ReadStock{}, level(3, 0))
		}, porcupine.Ok},

		{"a reserve seeing less than any confirm around it explains", func(h history) {
			h.op(0, opt, 0, 5, Reserve{"u1", 2}, OK(1)).
				op(0, opt, 10, 30, Confirm{"u1"}, OK(2)).
				op(1, opt, 12, 28, Reserve{"u2", 1}, OK(-1))
		}, porcupine.Illegal},
		{"oversold", func(h history) {
			h.op(0, opt, 0, 10, Reserve{"u1", 2}, OK(1)).
				op(1, opt, 0, 10, Reserve{"u2", 2}, OK(1))
		}, porcupine.Illegal},
		{"a refusal while the units were free, no confirm around it", func(h history) {
			h.op(0, opt, 0, 5, Reserve{"u1", 2}, OK(1)).
				op(0, opt, 10, 20, Confirm{"u1"}, OK(2)).
				op(1, opt, 25, 30, Reserve{"u2", 1}, insufficient)
		}, porcupine.Illegal},
		{"a read that goes back in time", func(h history) {
			h.op(0, opt, 0, 10, Reserve{"u1", 2}, OK(1)).
				op(1, opt, 15, 20, ReadStock{}, level(3, 2)).
				op(1, opt, 25, 30, ReadStock{}, level(3, 0))
		}, porcupine.Illegal},
		{"a read that counts a confirm twice", func(h history) {
			h.op(0, opt, 0, 5, Reserve{"u1", 2}, OK(1)).
				op(0, opt, 10, 30, Confirm{"u1"}, OK(2)).
				op(1, opt, 12, 28, ReadStock{}, level(1, 2))
		}, porcupine.Illegal},
		{"a reserve reporting more available than there was", func(h history) {
			h.op(0, opt, 0, 5, Reserve{"u1", 1}, OK(2)).
				op(1, opt, 10, 15, Reserve{"u2", 1}, OK(2))
		}, porcupine.Illegal},
		{"a write answered 503 that took effect", func(h history) {
			h.op(0, opt, 0, 5, Reserve{"u1", 2}, NotAccepted(domain.CodeUnavailable)).
				op(1, opt, 10, 15, ReadStock{}, level(3, 2))
		}, porcupine.Illegal},
		{"a release that released nothing while holding", func(h history) {
			h.op(0, opt, 0, 5, Reserve{"u1", 2}, OK(1)).
				op(0, opt, 10, 15, Release{"u1"}, OK(0))
		}, porcupine.Illegal},
		{"a confirm of more units than reserved", func(h history) {
			h.op(0, opt, 0, 5, Reserve{"u1", 2}, OK(1)).
				op(0, opt, 10, 15, Confirm{"u1"}, OK(3))
		}, porcupine.Illegal},
	})
}
