package shop

import (
	"context"
	"time"

	"github.com/holdfast/holdfast/storage"
	"github.com/holdfast/holdfast/worker"
)

// TypeExpire is the periodic tidy-up that marks lapsed reservations EXPIRED.
const TypeExpire = "shop:expire-reservations"

// Worker returns the shop's writes and its periodic tidy-up for the worker (wiring.Modules).
func Worker(ttl time.Duration) worker.Types {
	return func(st *storage.Stores) worker.Module {
		w := &Writes{TTL: ttl}
		c := NewCatalog(st.Pool)
		return worker.Module{
			Types: w.Types(),
			Periodic: []worker.Periodic{{Type: TypeExpire, Every: 30 * time.Second, Handle: func(ctx context.Context) error {
				_, err := c.ExpireReservations(ctx)
				return err
			}}},
		}
	}
}
