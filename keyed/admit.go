package keyed

import (
	"context"
	"time"

	"github.com/holdfast/holdfast/domain"
)

// Admission: the caps intake checks before it stores a request (429
// OVERLOADED), answered from samples this engine keeps rather than a read
// per request.

// backlogKeys bounds the backlog samples an engine keeps (see backlog):
// at about 100 B a sample, at most 10 MiB.
const backlogKeys = 50_000

type backlogSample struct {
	n  int64
	at time.Time
}

// overloaded is the 429 intake answers when a backlog is over its cap.
func overloaded(what string, retryAfter int) *domain.Problem {
	return domain.NewProblem(domain.CodeOverloaded,
		"%s is over its backlog cap; retry later", what).WithMeta("retryAfterSeconds", retryAfter)
}

// Admit refuses work over the key and queue caps. Backlog sizes come from a
// one-second cache that Post feeds with what it sees of each key's mailbox,
// so Admit costs no round trip: a key this API posted to within the last
// second is held to its cap, and a key it has not is let through (its
// backlog cannot have grown past the cap through this API, and the next
// request on it is held to what this one's post sees). A key that each
// request brings anew (a shopper's) so never costs a round trip before its
// request is stored.
func (e *Engine) Admit(ctx context.Context, queue string, keys []string) error {
	now := time.Now()
	for _, k := range keys {
		if s, ok := e.backlog.Get(k); ok && now.Sub(s.at) < time.Second && s.n >= int64(e.opt.KeyCap) {
			e.m.Overloaded.WithLabelValues(queue).Inc()
			return overloaded("key "+k, 1)
		}
	}
	if n := e.qsizes.Get(queue); n >= e.opt.QueueCap {
		e.m.Overloaded.WithLabelValues(queue).Inc()
		return overloaded("queue "+queue, 5)
	}
	return nil
}

// readQueueSize reads the queue's unfinished tasks, for the sample Admit
// checks (qsizes: read in the background at most once a second, as Redis
// may be slow, or frozen; 0 before the first); without an inspector it
// reports 0.
func (e *Engine) readQueueSize(queue string) (int, error) {
	if e.insp == nil {
		return 0, nil
	}
	info, err := e.insp.GetQueueInfo(queue)
	if err != nil {
		return 0, err
	}
	return info.Pending + info.Active + info.Scheduled + info.Retry + info.Aggregating, nil
}
