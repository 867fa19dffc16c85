package stays

import (
	"time"

	"github.com/holdfast/holdfast/storage"
	"github.com/holdfast/holdfast/worker"
)

// Worker returns the stays write types for the worker (wiring.Modules); together is
// HOLD_WRITES_TOGETHER (Writes.Together).
func Worker(holdTTL, lockWait time.Duration, together bool) worker.Types {
	return func(st *storage.Stores) worker.Module {
		w := &Writes{Holds: NewHoldStore(st.Redis), TTL: holdTTL, LockWait: lockWait, Together: together}
		return worker.Module{Types: w.Types()}
	}
}
