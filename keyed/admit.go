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

type queueSample struct {
	n          int
	at         time.Time
	refreshing bool
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
	if n := e.queueSize(queue); n >= e.opt.QueueCap {
		e.m.Overloaded.WithLabelValues(queue).Inc()
		return overloaded("queue "+queue, 5)
	}
	return nil
}

// queueSize returns the queue's unfinished tasks, refreshed at most once a
// second by one caller while the others use the last sample; without an
// inspector it reports 0, and on error the last sample (0 before the first).
func (e *Engine) queueSize(queue string) int {
	if e.insp == nil {
		return 0
	}
	e.qmu.Lock()
	s, ok := e.qsizes[queue]
	if (ok && time.Since(s.at) < time.Second) || s.refreshing {
		e.qmu.Unlock()
		return s.n
	}
	s.refreshing = true
	e.qsizes[queue] = s
	e.qmu.Unlock()

	n := s.n
	if info, err := e.insp.GetQueueInfo(queue); err == nil {
		n = info.Pending + info.Active + info.Scheduled + info.Retry + info.Aggregating
	}
	e.qmu.Lock()
	e.qsizes[queue] = queueSample{n: n, at: time.Now()}
	e.qmu.Unlock()
	return n
}
