package loadtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/holdfast/holdfast/client"
)

// The per-key scenarios, isolation (K4) and recovery (K5): first-come-
// first-served grabs on events of their own, submitted while holdfast's
// workers are held back, so that the whole backlog is in its mailboxes
// before any of it is applied; every grab has a seat waiting, so every
// write must end seated, exactly once.

// backlog is what both scenarios share: the queues held back, and the
// events whose grabs they follow, handing each terminal outcome to seen
// (when not nil), and check.
type backlog struct {
	held   *queueWatch
	events []*fcfsRush
	seen   func(client.Outcome)
}

// hold pauses holdfast's queues on the run's Redis until Finish, then
// creates the backlog's events (seatedEvents).
func (b *backlog) hold(ctx context.Context, e *Env, scenario, name string, n, grabs int) error {
	if e.Opt.RedisURL == "" {
		return fmt.Errorf("%s holds the workers back while it submits its backlog: give it holdfast's Redis (-redis)", scenario)
	}
	var err error
	if b.held, err = watchQueues(e.Opt.RedisURL, holdfastQueues); err != nil {
		return err
	}
	if err = b.held.pause(); err == nil {
		b.events, err = seatedEvents(ctx, e, name, n, grabs)
	}
	if err != nil {
		_ = b.held.close()
	}
	return err
}

// seatedEvents creates n events named name for grabs grabs, grab i on
// event i mod n, each with a seat for every grab it gets.
func seatedEvents(ctx context.Context, e *Env, name string, n, grabs int) ([]*fcfsRush, error) {
	events := make([]*fcfsRush, n)
	for k := range events {
		share := grabs / n
		if k < grabs%n {
			share++
		}
		events[k] = &fcfsRush{}
		if err := events[k].open(ctx, e, fmt.Sprintf("%s %d", name, k), share, share); err != nil {
			return nil, err
		}
	}
	return events, nil
}

// Journey i submits grab i, on event i mod len(events), and keeps it to
// follow.
func (b *backlog) Journey(ctx context.Context, e *Env, i int) error {
	_, err := b.events[i%len(b.events)].grab(ctx, e, i, true)
	return err
}

// Finish lets the workers go and follows every grab kept to its outcome.
func (b *backlog) Finish(ctx context.Context, e *Env) error {
	if err := b.held.close(); err != nil {
		return err
	}
	return followAll(ctx, e, b.events, b.seen)
}

// check checks each event, and more, as fcfs-rush checks its own (seats,
// users, order), and that every grab got a seat: one that ended otherwise
// was lost, refused or applied twice.
func (b *backlog) check(ctx context.Context, e *Env, more ...*fcfsRush) ([]string, error) {
	var out []string
	for _, ev := range slices.Concat(b.events, more) {
		bad, err := ev.Check(ctx, e)
		if err != nil {
			return nil, err
		}
		out = append(out, bad...)
		if won := len(ev.book.bySeat); won != ev.users {
			out = append(out, fmt.Sprintf("event %d: %d of its %d grabs got a seat, want every one", ev.eventID, won, ev.users))
		}
	}
	return out, nil
}

func (*backlog) measuresTimeOnly() {}

// otherPause is how long an isolation client waits between its writes.
const otherPause = 20 * time.Millisecond

// isolation measures K4, a hot key does not hold up other keys: Users
// grabs on one event (one key) are submitted while the workers are held
// back. Then the workers are let go and, while the backlog drains,
// OtherClients clients each send OtherWrites grabs, one at a time and
// otherPause apart, on Keys other events, each waiting for its outcome.
// Their accept→terminal latency (the API's timestamps) is the measure; it
// counts only if the hot backlog was still draining when the last of them
// ended, which the event's remaining seats tell.
type isolation struct {
	backlog
	others             []*fcfsRush
	n, clients, writes int // Users, OtherClients, OtherWrites
	mu                 sync.Mutex
	latencies          []time.Duration // the other writes' accept→terminal
	open               int             // the hot backlog not yet applied when the last other client ended
	openErr            error
	rep                *IsolationReport
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
	s.n, s.clients, s.writes = orDefault(e.Opt.Users, 20_000), orDefault(e.Opt.OtherClients, 4), orDefault(e.Opt.OtherWrites, 25)
	if err := s.hold(ctx, e, "isolation", "isolation hot", 1, s.n); err != nil {
		return 0, err
	}
	var err error
	if s.others, err = seatedEvents(ctx, e, "isolation other", orDefault(e.Opt.Keys, 10), s.clients*s.writes); err != nil {
		_ = s.held.close()
	}
	return s.n, err
}

// Finish, once the whole backlog is in, lets the workers go and runs the
// other clients while it drains; then it reads how much of the backlog is
// still open, the hot event's remaining seats, and follows the backlog to
// its outcomes.
func (s *isolation) Finish(ctx context.Context, e *Env) error {
	if err := s.held.resume(); err != nil {
		return err
	}
	err := forEach(s.clients, s.clients, func(c int) error { return s.otherClient(ctx, e, c) })
	var ev client.PublicEvent
	ev, s.openErr = e.Admin.PublicEvent(ctx, s.events[0].eventID)
	s.open = ev.RemainingSeats
	return errors.Join(err, s.backlog.Finish(ctx, e))
}

// otherClient is other client c: it sends its writes, round the other
// events, each followed to its outcome.
func (s *isolation) otherClient(ctx context.Context, e *Env, c int) error {
	for j := range s.writes {
		if j > 0 {
			select {
			case <-time.After(otherPause):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		n := c*s.writes + j
		out, err := s.others[n%len(s.others)].grab(ctx, e, s.n+n, false)
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

func (s *isolation) Check(ctx context.Context, e *Env) ([]string, error) {
	out, err := s.check(ctx, e, s.others...)
	if err != nil {
		return nil, err
	}
	s.rep = &IsolationReport{Backlog: s.n, OtherKeys: len(s.others), OtherClients: s.clients, OtherWrites: s.writes,
		Other: percentiles(s.latencies), BacklogOpen: s.open}
	switch {
	case s.openErr != nil:
		out = append(out, fmt.Sprintf("the hot backlog still open could not be read: %v", s.openErr))
	case s.open <= 0:
		out = append(out, fmt.Sprintf("the hot key's backlog of %d had drained before the last of the other writes ended, so they were not "+
			"measured beside it: give it more grabs (-users) or the other clients fewer writes", s.n))
	}
	return out, nil
}

func (s *isolation) report(r *Report) { r.Isolation = s.rep }

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

// victimBatches is the metric that tells the victim worker is at work: the
// batches it has applied, summed over its queues.
const victimBatches = "holdfast_keyed_batch_size_count"

// recovery measures K5, recovery after a worker crash: Users grabs spread
// over Keys events are submitted while the workers are held back; then
// the workers are let go and the grabs followed to their outcomes. Once
// the victim worker (KillPID) has applied a batch of its own (its
// VictimMetrics), the tool kills it with SIGKILL: in the middle of its
// work, with leases held.
// The measure is how long after the kill the last write became terminal
// (the API's completedAt), which the dead holder's lease (LEASE_TTL) and
// the reconciler bound; every write must end seated, exactly once.
type recovery struct {
	backlog
	victim  *os.Process
	mu      sync.Mutex
	done    []time.Time // completedAt of every write seen terminal
	rep     RecoveryReport
	killed  time.Time // zero: not killed
	killErr error
}

// RecoveryReport is what recovery measured.
type RecoveryReport struct {
	Writes int `json:"writes"`
	Keys   int `json:"keys"`
	// LeaseTTLSeconds is the workers' LEASE_TTL, as the run was told
	// (Options.LeaseTTL); 0 when it was not.
	LeaseTTLSeconds float64 `json:"leaseTtlSeconds,omitempty"`
	Killed          bool    `json:"killed"`
	// VictimBatches is how many batches the victim had applied when it
	// was killed (its /metrics); 0 when not known.
	VictimBatches float64 `json:"victimBatches,omitempty"`
	// OpenAtKill is the writes that became terminal after the kill.
	OpenAtKill int `json:"openAtKill"`
	// AllTerminalAfterKillSeconds is the time from the kill to the last
	// write's completedAt.
	AllTerminalAfterKillSeconds float64 `json:"allTerminalAfterKillSeconds"`
}

func (s *recovery) Setup(ctx context.Context, e *Env) (int, error) {
	if e.Opt.KillPID <= 0 || e.Opt.VictimMetrics == "" {
		return 0, errors.New("recovery kills a worker mid-work: give its process id (-kill-pid) and /metrics (-victim-metrics)")
	}
	var err error
	if s.victim, err = os.FindProcess(e.Opt.KillPID); err == nil {
		err = s.victim.Signal(syscall.Signal(0))
	}
	if err != nil {
		return 0, fmt.Errorf("the worker to kill, process %d: %w", e.Opt.KillPID, err)
	}
	s.seen = func(out client.Outcome) {
		if out.CompletedAt != nil { // a terminal outcome has one
			s.mu.Lock()
			s.done = append(s.done, *out.CompletedAt)
			s.mu.Unlock()
		}
	}
	s.rep = RecoveryReport{Writes: orDefault(e.Opt.Users, 10_000), Keys: orDefault(e.Opt.Keys, 100), LeaseTTLSeconds: e.Opt.LeaseTTL.Seconds()}
	// Many keys, so that the second worker to wake after the resume still
	// finds keys to drain: the first takes as many as it has slots (64).
	return s.rep.Writes, s.hold(ctx, e, "recovery", "recovery", s.rep.Keys, s.rep.Writes)
}

// Finish lets the workers go, follows every write to its outcome and kills
// the victim on the way.
func (s *recovery) Finish(ctx context.Context, e *Env) error {
	killing, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { s.killWhenBusy(killing, e.Opt.VictimMetrics) })
	err := s.backlog.Finish(ctx, e)
	stop()
	wg.Wait()
	return err
}

// killWhenBusy kills the victim once it has applied a batch, as its
// /metrics tell; it gives up when ctx ends first.
func (s *recovery) killWhenBusy(ctx context.Context, metrics string) {
	hc := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		if v, err := scrape(ctx, hc, metrics, victimBatches); err == nil && v[victimBatches] > 0 {
			s.rep.VictimBatches, s.killed, s.killErr = v[victimBatches], time.Now(), s.victim.Kill()
			return
		}
	}
}

func (s *recovery) Check(ctx context.Context, e *Env) ([]string, error) {
	out, err := s.check(ctx, e)
	if err != nil {
		return nil, err
	}
	r := &s.rep
	r.Killed = !s.killed.IsZero() && s.killErr == nil
	var last time.Time
	for _, t := range s.done {
		if t.After(s.killed) {
			r.OpenAtKill++
		}
		if t.After(last) {
			last = t
		}
	}
	switch {
	case s.killErr != nil:
		out = append(out, fmt.Sprintf("the victim worker could not be killed: %v", s.killErr))
	case !r.Killed:
		out = append(out, "every write was terminal before the victim worker was seen at work: it was not killed")
	case r.OpenAtKill == 0:
		out = append(out, "no write was open when the victim worker was killed: the kill did not land mid-work")
	default:
		r.AllTerminalAfterKillSeconds = round(last.Sub(s.killed).Seconds(), 3)
	}
	return out, nil
}

func (s *recovery) report(r *Report) { r.Recovery = &s.rep }

// load describes recovery's load.
func (r *RecoveryReport) load() string {
	return fmt.Sprintf("%d grabs on %d events, submitted with the workers held back; two workers, one killed with SIGKILL "+
		"once it has applied a batch", r.Writes, r.Keys)
}

// measured says what recovery measured.
func (r *RecoveryReport) measured() string {
	if !r.Killed {
		return "the victim worker was not killed"
	}
	batches := ""
	if r.VictimBatches > 0 {
		batches = fmt.Sprintf(" after %.0f batches of its own", r.VictimBatches)
	}
	return fmt.Sprintf("killed%s with %d writes open; all terminal %.1f s after the kill (LEASE_TTL %s)",
		batches, r.OpenAtKill, r.AllTerminalAfterKillSeconds, r.leaseTTL())
}

// leaseTTL is the run's LEASE_TTL as the table prints it.
func (r *RecoveryReport) leaseTTL() string {
	if r.LeaseTTLSeconds <= 0 {
		return "not told"
	}
	return (time.Duration(r.LeaseTTLSeconds * float64(time.Second))).String()
}
