package loadtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast/holdfast/client"
)

// otherPause is how long an isolation client waits between its writes.
const otherPause = 20 * time.Millisecond

// isolation measures K4, a hot key does not hold up other keys: Users
// first-come-first-served grabs on one event (one key) are submitted on
// Concurrency clients while holdfast's workers are held back (-redis), so
// the whole backlog waits in the key's mailbox. Then the workers are let
// go and, while the backlog drains, OtherClients clients each send
// OtherWrites grabs, one at a time and otherPause apart, on Keys other
// events, each waiting for its outcome. Their accept→terminal latency (the
// API's timestamps) is the measure; it counts only if the hot backlog was
// still draining when the last of them ended, which the event's remaining
// seats tell (every hot grab has a seat).
type isolation struct {
	hot    *fcfsRush
	others []*fcfsRush
	held   *queueWatch
	// backlog, clients and writes are Users, OtherClients and OtherWrites.
	backlog, clients, writes int
	hotLeft                  atomic.Int64  // hot grabs not yet submitted
	allHot                   chan struct{} // closed when hotLeft reaches 0
	othersLeft               atomic.Int64  // other clients still writing
	letGo                    sync.Once
	letGoErr                 error
	mu                       sync.Mutex
	latencies                []time.Duration // the other writes' accept→terminal
	// open is the hot backlog not yet applied when the last other client
	// ended; openErr why it could not be read.
	open    int
	openErr error
	report  *IsolationReport
}

// IsolationReport is what isolation measured.
type IsolationReport struct {
	Backlog      int `json:"backlog"`      // grabs on the hot event
	OtherKeys    int `json:"otherKeys"`    // other events
	OtherClients int `json:"otherClients"` // clients writing on them
	OtherWrites  int `json:"otherWrites"`  // writes of each of those clients
	// Other is the other writes' accept→terminal latency.
	Other Percentiles `json:"otherAcceptToTerminalLatency"`
	// BacklogOpen is how many of the hot grabs were not yet applied when
	// the last other write ended; 0 means the backlog had drained, and
	// the measure does not count.
	BacklogOpen int `json:"backlogOpenAtLastOther"`
}

func (s *isolation) Setup(ctx context.Context, e *Env) (int, error) {
	s.backlog = orDefault(e.Opt.Users, 20_000)
	s.clients, s.writes = orDefault(e.Opt.OtherClients, 4), orDefault(e.Opt.OtherWrites, 25)
	s.hotLeft.Store(int64(s.backlog))
	s.othersLeft.Store(int64(s.clients))
	s.allHot = make(chan struct{})
	var err error
	if s.held, err = holdWorkers(e, "isolation"); err != nil {
		return 0, err
	}
	s.hot = &fcfsRush{}
	if err = s.hot.open(ctx, e, "isolation hot", s.backlog, s.backlog); err == nil {
		s.others, err = seatedEvents(ctx, e, "isolation other", orDefault(e.Opt.Keys, 10), s.clients*s.writes)
	}
	if err != nil {
		_ = s.held.close()
		return 0, err
	}
	return s.backlog + s.clients, nil
}

// Journey i is hot grab i, or, past the backlog, other client i-backlog.
func (s *isolation) Journey(ctx context.Context, e *Env, i int) error {
	if i < s.backlog {
		defer func() {
			if s.hotLeft.Add(-1) == 0 {
				close(s.allHot)
			}
		}()
		_, err := s.hot.grab(ctx, e, i, true)
		return err
	}
	defer s.otherDone(ctx, e)
	return s.otherClient(ctx, e, i-s.backlog)
}

// otherClient is other client c: once the whole backlog is in, it lets the
// workers go and sends its writes, round the other events.
func (s *isolation) otherClient(ctx context.Context, e *Env, c int) error {
	select {
	case <-s.allHot:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.letGo.Do(func() { s.letGoErr = s.held.resume() })
	if s.letGoErr != nil {
		return s.letGoErr
	}
	for j := range s.writes {
		if j > 0 {
			select {
			case <-time.After(otherPause):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		n := c*s.writes + j
		out, err := s.others[n%len(s.others)].grab(ctx, e, s.backlog+n, false)
		if err != nil {
			return err
		}
		if out.CompletedAt != nil { // a terminal outcome has one
			s.mu.Lock()
			s.latencies = append(s.latencies, out.CompletedAt.Sub(out.AcceptedAt))
			s.mu.Unlock()
		}
	}
	return nil
}

// otherDone, in the last other client to end, reads how much of the hot
// backlog is still open: the hot event's remaining seats.
func (s *isolation) otherDone(ctx context.Context, e *Env) {
	if s.othersLeft.Add(-1) > 0 {
		return
	}
	var ev client.PublicEvent
	ev, s.openErr = e.Admin.PublicEvent(ctx, s.hot.eventID)
	s.open = ev.RemainingSeats
}

// Finish lets the workers go if no other client did, and follows the hot
// backlog to its outcomes.
func (s *isolation) Finish(ctx context.Context, e *Env) error {
	if err := s.held.close(); err != nil {
		return err
	}
	return followAll(ctx, e, []*fcfsRush{s.hot}, nil)
}

func (s *isolation) Check(ctx context.Context, e *Env) ([]string, error) {
	out, err := checkSeated(ctx, e, append([]*fcfsRush{s.hot}, s.others...))
	if err != nil {
		return nil, err
	}
	s.report = &IsolationReport{Backlog: s.backlog, OtherKeys: len(s.others), OtherClients: s.clients, OtherWrites: s.writes,
		Other: percentiles(sorted(s.latencies)), BacklogOpen: s.open}
	switch {
	case s.openErr != nil:
		out = append(out, fmt.Sprintf("the hot backlog still open could not be read: %v", s.openErr))
	case s.open <= 0:
		out = append(out, fmt.Sprintf("the hot key's backlog of %d had drained before the last of the other writes ended, so they were not "+
			"measured beside it: give it more grabs (-users) or the other clients fewer writes", s.backlog))
	}
	return out, nil
}

func (s *isolation) isolationReport() *IsolationReport { return s.report }
func (s *isolation) measuresTimeOnly()                 {}

// load describes isolation's load.
func (r *IsolationReport) load() string {
	return fmt.Sprintf("%d grabs on one event, submitted with the workers held back; then %d clients × %d grabs on %d other events, "+
		"one at a time, %s apart", r.Backlog, r.OtherClients, r.OtherWrites, r.OtherKeys, otherPause)
}

// measured says what isolation measured.
func (r *IsolationReport) measured() string {
	return fmt.Sprintf("other keys' accept→terminal p50 / p99 / max %.1f / %.1f / %.1f ms over %d writes; %d of the backlog still open at the last",
		r.Other.P50, r.Other.P99, r.Other.Max, r.Other.Count, r.BacklogOpen)
}
