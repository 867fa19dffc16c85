package loadtest

import (
	"context"
	"fmt"
	"sync"

	"github.com/holdfast/holdfast/client"
	"github.com/holdfast/holdfast/domain"
)

// cartCheckout: shop users put one or two of a few contended product
// options in their carts, reserve the cart, then pay (four in five) or
// release. Stock is scarce, so many reserves are refused.
type cartCheckout struct {
	users   []int64
	options []int64
	stock   int

	mu   sync.Mutex
	sold map[int64]int // option → confirmed quantity
	bad  violations
}

const cartOptions = 5

func (s *cartCheckout) Setup(ctx context.Context, e *Env) (int, error) {
	n := orDefault(e.Opt.Users, 300)
	s.stock = max(1, n/cartOptions/2) // about half the demand can be met
	s.sold = map[int64]int{}
	var opts []client.NewOption
	for i := range cartOptions {
		// Codes are unique, so each run's carry its id: runs share a database.
		opts = append(opts, client.NewOption{OptionCode: fmt.Sprintf("%s-OPT-%d", e.RunID, i), Price: 1000 * int64(i+1), StockQuantity: s.stock, IsActive: true})
	}
	p, err := e.Admin.CreateProduct(ctx, "load product "+e.RunID, opts...)
	if err != nil {
		return 0, err
	}
	for _, o := range p.Options {
		s.options = append(s.options, o.ProductOptionID)
	}
	s.users = make([]int64, n)
	err = forEach(n, 16, func(i int) error {
		u, err := e.Admin.CreateUser(ctx, fmt.Sprintf("%s shopper %d", e.RunID, i))
		s.users[i] = u.UserID
		return err
	})
	return n, err
}

func (s *cartCheckout) Journey(ctx context.Context, e *Env, i int) error {
	uid := s.users[i]
	c, err := e.As(fmt.Sprint(uid), domain.RoleUser)
	if err != nil {
		return err
	}
	first := e.IntN(len(s.options))
	lines := []int64{s.options[first]}
	if e.IntN(2) == 0 {
		lines = append(lines, s.options[(first+1+e.IntN(len(s.options)-1))%len(s.options)])
	}
	for _, o := range lines {
		if err := e.Read("cart.put", func() error { return c.SetCartItem(ctx, o, 1) }); err != nil {
			return err
		}
	}
	out, err := e.Write(ctx, c, "order.reserve", func(ctx context.Context) (client.Accepted, error) { return c.ReserveOrder(ctx, uid) })
	if err != nil {
		return err
	}
	switch err := out.Err(); {
	case client.IsCode(err, client.CodeInsufficientAvailableStock):
		return nil
	case err != nil:
		return fmt.Errorf("reserve for %d: %w", uid, err)
	}
	if e.IntN(5) == 0 {
		out, err := e.Write(ctx, c, "order.release", func(ctx context.Context) (client.Accepted, error) { return c.ReleaseOrder(ctx) })
		if err != nil {
			return err
		}
		return out.Err()
	}
	out, err = e.Write(ctx, c, "order.confirm", func(ctx context.Context) (client.Accepted, error) { return c.ConfirmOrder(ctx, uid) })
	if err != nil {
		return err
	}
	var o client.Order
	if err := out.Decode(&o); err != nil {
		return fmt.Errorf("confirm for %d: %w", uid, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range o.Lines {
		s.sold[l.ProductOptionID] += l.Quantity
	}
	if len(o.Lines) != len(lines) {
		s.bad.add("user %d ordered %d lines, had %d in the cart", uid, len(o.Lines), len(lines))
	}
	return nil
}

// Check compares each option's stock with what was sold: stock went down by
// exactly the confirmed quantity, never below zero, and nothing is left
// reserved once every user has paid or released.
func (s *cartCheckout) Check(ctx context.Context, e *Env) ([]string, error) {
	out := s.bad.all()
	for _, id := range s.options {
		st, err := e.Admin.Stock(ctx, id)
		if err != nil {
			return nil, err
		}
		sold := s.sold[id]
		if sold > s.stock {
			out = append(out, fmt.Sprintf("option %d oversold: %d sold of %d", id, sold, s.stock))
		}
		if st.StockQuantity != s.stock-sold {
			out = append(out, fmt.Sprintf("option %d: stock %d, want %d - %d sold", id, st.StockQuantity, s.stock, sold))
		}
		if st.ReservedQuantity != 0 || st.AvailableStock != st.StockQuantity {
			out = append(out, fmt.Sprintf("option %d: %d still reserved, %d available of %d", id, st.ReservedQuantity, st.AvailableStock, st.StockQuantity))
		}
	}
	return out, nil
}
