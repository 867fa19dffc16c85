package lincheck

import (
	"fmt"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/holdfast/holdfast/domain"
)

// The shop's operations on one product option (the key), each user's cart
// holding that option alone.

// Reserve is a user's reserve of a cart of Units units of the key's option
// (POST /orders/reserve). OK's Value: the availableStock its result reports
// (an int). Refusals: INSUFFICIENT_AVAILABLE_STOCK, DUPLICATE_RESERVATION.
type Reserve struct {
	User  string
	Units int
}

// Release gives a user's reservation back (DELETE /orders/reserve). OK's
// Value: the "released" count of its result (an int: 1 or 0).
type Release struct{ User string }

// Confirm turns a user's reservation into an order (POST /orders). OK's
// Value: the units its order line holds (an int). Refusal:
// RESERVATION_NOT_FOUND.
type Confirm struct{ User string }

// ReadStock is GET /product-options/{id}/stock. OK's Value: a StockLevel.
type ReadStock struct{}

// StockLevel is a stock read's answer.
type StockLevel struct{ Stock, Reserved, Available int }

func (r Reserve) String() string { return fmt.Sprintf("%s reserves %d", r.User, r.Units) }
func (r Release) String() string { return r.User + " releases" }
func (c Confirm) String() string { return c.User + " confirms" }
func (ReadStock) String() string { return "read stock" }
func (l StockLevel) String() string {
	return fmt.Sprintf("stock %d reserved %d available %d", l.Stock, l.Reserved, l.Available)
}

// The two halves of an applied confirm (see Stock).
type (
	confirmTake struct{ User string }
	confirmDone struct{ User string }
)

func (c confirmTake) String() string { return c.User + " confirms (stock taken)" }
func (c confirmDone) String() string { return c.User + " confirms (reservation closed)" }

// stockState is an option's stock and its live reservations, by user.
type stockState struct {
	stock int
	held  []holding // sorted by user
}

// holding is a user's live reservation; confirming: its confirm has taken
// the stock but still counts it as reserved (the first half of a confirm).
type holding struct {
	user       string
	units      int
	confirming bool
}

func (s stockState) find(user string) (int, bool) {
	return slices.BinarySearchFunc(s.held, user, func(h holding, u string) int { return strings.Compare(h.user, u) })
}

func (s stockState) reserved() int {
	n := 0
	for _, h := range s.held {
		n += h.units
	}
	return n
}

// view is the availability a reserve decides on: stock less every live
// reservation, a confirming one included.
func (s stockState) view() int { return s.stock - s.reserved() }

func (s stockState) confirming() bool {
	return slices.ContainsFunc(s.held, func(h holding) bool { return h.confirming })
}

func (s stockState) with(i int, h holding) stockState {
	s.held = slices.Insert(slices.Clone(s.held), i, h)
	return s
}

func (s stockState) without(i int) stockState {
	s.held = slices.Delete(slices.Clone(s.held), i, i+1)
	return s
}

func (s stockState) set(i int, h holding) stockState {
	s.held = slices.Clone(s.held)
	s.held[i] = h
	return s
}

func (s stockState) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stock %d, available %d", s.stock, s.view())
	for _, h := range s.held {
		fmt.Fprintf(&b, "; %s holds %d", h.user, h.units)
		if h.confirming {
			b.WriteString(" (confirming)")
		}
	}
	return b.String()
}

// Stock is the model of a product option's stock (the shop, docs/shop.md):
// stock maps each key to the option's stockQuantity when the history began
// (no reservation live then).
//
// Sequentially: a reserve of k units by a user with no live reservation
// succeeds if available = stock − Σ live reservations ≥ k, reporting
// available − k, else INSUFFICIENT_AVAILABLE_STOCK; a user with one is
// refused DUPLICATE_RESERVATION. A confirm deducts the user's reserved
// units from stock and ends the reservation (available unchanged), or is
// RESERVATION_NOT_FOUND. A release ends it (released 1) or finds none
// (released 0). A read returns stock, reserved and available exactly: it
// is one statement, one snapshot.
//
// One documented allowance (docs/shop.md, shop/reserve.go): a confirm holds
// only its user's key, and a reserve batch reads the reserved sums before
// the stock, so a confirm that commits between the two reads is counted
// twice and the reserve sees less available than there is — it may be
// refused at the boundary, or report that much less, never more. The model
// says exactly that: an applied confirm is two steps inside its interval,
// the stock taken and then the reservation closed, and a reserve placed
// between them decides on the stock less every live reservation, the
// confirming one included. Reads and releases of the confirming user may
// not fall between them (a read is one snapshot; a release holds the same
// user key), so nothing else gains from the split.
//
// Reservations do not lapse within a history (RESERVATION_TTL is 30 min);
// expiry is modelled by RoomNight.
func Stock(stock map[string]int) porcupine.Model {
	return spec[stockState]{
		init:   func(key string) stockState { return stockState{stock: stock[key]} },
		step:   stockStep,
		equal:  func(a, b stockState) bool { return a.stock == b.stock && slices.Equal(a.held, b.held) },
		show:   stockState.String,
		expand: splitConfirms,
	}.model()
}

// splitConfirms puts each confirm that may have been applied as its two
// halves, with its times and outcome.
func splitConfirms(ops []porcupine.Operation) []porcupine.Operation {
	out := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		c, ok := op.Input.(Call).Op.(Confirm)
		if !ok || !op.Output.(Outcome).hasEffect() {
			out = append(out, op)
			continue
		}
		take, done := op, op
		take.Input = withOp(op.Input.(Call), confirmTake(c))
		done.Input = withOp(op.Input.(Call), confirmDone(c))
		out = append(out, take, done)
	}
	return out
}

func withOp(c Call, op any) Call {
	c.Op = op
	return c
}

func stockStep(s stockState, c Call, out Outcome) (bool, stockState) {
	unknown := out.Status == StatusUnknown
	switch op := c.Op.(type) {
	case Reserve:
		return reserveStep(s, op, out)
	case confirmTake:
		i, holds := s.find(op.User)
		if !holds || s.held[i].confirming {
			return unknown, s
		}
		h := s.held[i]
		if !unknown && out.Value != h.units {
			return false, s
		}
		h.confirming = true
		s = s.set(i, h)
		s.stock -= h.units
		return true, s
	case confirmDone:
		i, holds := s.find(op.User)
		if !holds || !s.held[i].confirming {
			return unknown, s
		}
		return true, s.without(i)
	case Confirm: // refused: only the unapplied ones are not split
		_, holds := s.find(op.User)
		return out.Status == StatusRefused && out.Code == domain.CodeReservationNotFound && !holds, s
	case Release:
		i, holds := s.find(op.User)
		switch {
		case holds && s.held[i].confirming:
			return unknown, s
		case unknown:
			if holds {
				return true, s.without(i)
			}
			return true, s
		case out.Status != StatusOK:
			return false, s
		case holds:
			return out.Value == 1, s.without(i)
		}
		return out.Value == 0, s
	case ReadStock:
		r := s.reserved()
		return unknown || (out.Status == StatusOK && !s.confirming() &&
			out.Value == StockLevel{Stock: s.stock, Reserved: r, Available: s.stock - r}), s
	}
	return false, s
}

func reserveStep(s stockState, op Reserve, out Outcome) (bool, stockState) {
	i, holds := s.find(op.User)
	fits := !holds && s.view() >= op.Units
	switch {
	case out.Status == StatusUnknown:
	case out.Status == StatusOK:
		if !fits || out.Value != s.view()-op.Units {
			return false, s
		}
	case out.Code == domain.CodeDuplicateReservation:
		return holds, s
	case out.Code == domain.CodeInsufficientStock:
		return !holds && !fits, s
	default:
		return false, s
	}
	if fits {
		s = s.with(i, holding{user: op.User, units: op.Units})
	}
	return true, s
}
