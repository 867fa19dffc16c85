package lincheck

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

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

// stockState is an option's stock, its live reservations by user, and
// the reservations that ended (released or confirmed) recently enough to
// matter.
type stockState struct {
	stock int
	held  []holding // sorted by user
	ended []ended   // sorted
	// latest is the latest send (UnixNano) of the operations placed: a
	// function of which, not of their order, so states stay comparable.
	latest int64
}

// horizoned is an operation of a key whose reserves all lasted at most
// horizon (from send to answer): a reservation whose end was learnt more
// than horizon before the latest send placed can be left out by no reserve
// still to come, which was answered after that send and so sent after the
// horizon. The state forgets it.
type horizoned struct {
	op      any
	horizon int64
}

func (h horizoned) String() string { return fmt.Sprint(h.op) }

// withHorizon wraps a key's operations with its reserves' longest
// duration (no limit if one was never answered).
func withHorizon(ops []porcupine.Operation) []porcupine.Operation {
	horizon := int64(0)
	for _, op := range ops {
		if _, ok := op.Input.(Call).Op.(Reserve); ok {
			horizon = max(horizon, op.Return-op.Call) // never - Call when unknown
		}
	}
	out := make([]porcupine.Operation, len(ops))
	for i, op := range ops {
		c := op.Input.(Call)
		c.Op = horizoned{c.Op, horizon}
		op.Input = c
		out[i] = op
	}
	return out
}

// placed notes c's send and forgets what no reserve to come can use.
func (s stockState) placed(c Call, horizon int64) stockState {
	s.latest = max(s.latest, c.Sent.UnixNano())
	from, _ := slices.BinarySearchFunc(s.ended, s.latest-horizon, func(e ended, t int64) int { return cmp.Compare(e.learnt, t) })
	if from > 0 {
		s.ended = slices.Clone(s.ended[from:])
	}
	return s
}

// holding is a user's live reservation.
type holding struct {
	user  string
	units int
}

// ended is a reservation that ended, by the time its client learnt it
// (UnixNano; the far future if it never did) and its units.
type ended struct {
	learnt int64
	units  int
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

func (s stockState) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stock %d, available %d", s.stock, s.stock-s.reserved())
	for _, h := range s.held {
		fmt.Fprintf(&b, "; %s holds %d", h.user, h.units)
	}
	return b.String()
}

// end ends holding i (released or confirmed), as learnt at learnt.
func (s stockState) end(i int, learnt time.Time) stockState {
	e := ended{learnt.UnixNano(), s.held[i].units}
	j, _ := slices.BinarySearchFunc(s.ended, e, func(a, b ended) int {
		return cmp.Or(cmp.Compare(a.learnt, b.learnt), cmp.Compare(a.units, b.units))
	})
	s.ended = slices.Insert(slices.Clone(s.ended), j, e)
	s.held = slices.Delete(slices.Clone(s.held), i, i+1)
	return s
}

// overlooked reports whether a reserve sent at sent may have left out
// exactly x units: those of some of the ended reservations whose clients
// learnt so after it was sent. all is the most it may leave out.
func (s stockState) overlooked(sent time.Time, x int) (ok bool, all int) {
	from, _ := slices.BinarySearchFunc(s.ended, sent.UnixNano(), func(e ended, t int64) int { return cmp.Compare(e.learnt, t) })
	eligible := s.ended[from:]
	for _, e := range eligible {
		all += e.units
	}
	if x < 0 || x > all {
		return false, all
	}
	sums := make([]bool, x+1) // sums[y]: some of them make y
	sums[0] = true
	for _, e := range eligible {
		for y := x; y >= e.units; y-- {
			sums[y] = sums[y] || sums[y-e.units]
		}
	}
	return sums[x], all
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
// (released 0). A read returns stock, reserved and available exactly at
// one point of its interval: it is one statement, one snapshot.
//
// One documented allowance (docs/shop.md, shop/reserve.go): confirms and
// releases hold only their user's key, and a reserve batch reads the
// options' reserved sums, then, in a second statement, their stock. A
// confirm or release that commits between the two reads is not seen to
// lower the reserved sum (a confirm is seen to lower the stock), so the
// batch decides on less available than there is, by the units those
// reservations held: it may be refused at the boundary, or report that
// much less, never more. The model allows exactly that much, read from
// outside: a reserve may decide on available − x, where x is the units of
// some of the reservations the order has ended before it whose clients
// learnt so after the reserve was sent (a reservation that ended between
// the reserve's two reads was learnt ended after them). Which ones is not
// pinned to a suffix of the order, so the allowance is a little wider than
// the batch's: any of them, not only those after one instant. A refusal
// must hold even with all of them left out; an applied reserve must
// report available − x − k for some such x.
//
// Reservations do not lapse within a history (RESERVATION_TTL is 30 min);
// expiry is modelled by RoomNight.
func Stock(stock map[string]int) porcupine.Model {
	return spec[stockState]{
		init: func(key string) stockState { return stockState{stock: stock[key]} },
		step: stockStep,
		equal: func(a, b stockState) bool {
			return a.stock == b.stock && a.latest == b.latest && slices.Equal(a.held, b.held) && slices.Equal(a.ended, b.ended)
		},
		show:   stockState.String,
		expand: withHorizon,
	}.model()
}

func stockStep(s stockState, c Call, out Outcome) (bool, stockState) {
	h := c.Op.(horizoned)
	c.Op = h.op
	ok, s := stockStepOf(s, c, out)
	return ok, s.placed(c, h.horizon)
}

func stockStepOf(s stockState, c Call, out Outcome) (bool, stockState) {
	unknown := out.Status == StatusUnknown
	switch op := c.Op.(type) {
	case Reserve:
		return reserveStep(s, c, op, out)
	case Confirm:
		i, holds := s.find(op.User)
		switch {
		case unknown && holds, out.Status == StatusOK && holds && out.Value == s.held[i].units:
			s.stock -= s.held[i].units
			return true, s.end(i, c.Learnt)
		case unknown:
			return true, s
		}
		return out.Code == domain.CodeReservationNotFound && !holds, s
	case Release:
		i, holds := s.find(op.User)
		switch {
		case unknown && holds:
			return true, s.end(i, c.Learnt)
		case unknown:
			return true, s
		case out.Status != StatusOK:
			return false, s
		case holds:
			return out.Value == 1, s.end(i, c.Learnt)
		}
		return out.Value == 0, s
	case ReadStock:
		r := s.reserved()
		return unknown || (out.Status == StatusOK && out.Value == StockLevel{Stock: s.stock, Reserved: r, Available: s.stock - r}), s
	}
	return false, s
}

func reserveStep(s stockState, c Call, op Reserve, out Outcome) (bool, stockState) {
	i, holds := s.find(op.User)
	available := s.stock - s.reserved()
	switch {
	case holds:
		return unknown(out) || out.Code == domain.CodeDuplicateReservation, s
	case unknown(out):
		if available < op.Units {
			return true, s
		}
	case out.Status == StatusOK:
		v, _ := out.Value.(int)
		// The units left out: none when the reserve saw everything.
		if ok, _ := s.overlooked(c.Sent, available-op.Units-v); v < 0 || !ok {
			return false, s
		}
	case out.Code == domain.CodeInsufficientStock:
		_, all := s.overlooked(c.Sent, 0)
		return available-all < op.Units, s
	default:
		return false, s
	}
	s.held = slices.Insert(slices.Clone(s.held), i, holding{user: op.User, units: op.Units})
	return true, s
}

func unknown(o Outcome) bool { return o.Status == StatusUnknown }
