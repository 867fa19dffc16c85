package stays

import (
	"time"

	"github.com/holdfast/holdfast/storage"
	"github.com/holdfast/holdfast/worker"
)

// Worker returns the stays write types for worker.Run.
func Worker(holdTTL, lockWait time.Duration) worker.Types {
	return func(st *storage.Stores) worker.Module {
		w := &Writes{Holds: NewHoldStore(st.Redis), TTL: holdTTL, LockWait: lockWait}
		return worker.Module{Types: w.Types()}
	}
}
