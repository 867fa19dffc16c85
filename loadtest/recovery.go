package loadtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/holdfast/holdfast/client"
)

// victimBatches is the metric that tells the victim worker is at work: the
// batches it has applied, summed over its queues.
const victimBatches = "holdfast_keyed_batch_size_count"

// recovery measures K5, recovery after a worker crash: Users
// first-come-first-served grabs spread over Keys events are submitted
// while holdfast's workers are held back (-redis); then the workers are let
// go and the grabs followed to their outcomes. Once the victim worker
// (KillPID) has applied a batch of its own (its VictimMetrics; without
// them, once the clients have seen an outcome), the tool kills it with
// SIGKILL: in the middle of its work, with leases held. The measure is how long after the kill the
// last write became terminal (the API's completedAt), which the dead
// holder's lease (LEASE_TTL) and the reconciler bound; every write must end
// seated, exactly once.
type recovery struct {
	events []*fcfsRush
	held   *queueWatch
	writes int
	victim *os.Process
	mu     sync.Mutex
	done   []time.Time // completedAt of every write seen terminal
	kill   kill
	report *RecoveryReport
}

// kill is when the victim was killed (zero: it was not), with how many
// batches its /metrics showed then, and the error of the signal.
type kill struct {
	at      time.Time
	batches float64
	err     error
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
	if e.Opt.KillPID <= 0 {
		return 0, errors.New("recovery kills a worker mid-work: give its process id (-kill-pid)")
	}
	var err error
	if s.victim, err = os.FindProcess(e.Opt.KillPID); err == nil {
		err = s.victim.Signal(syscall.Signal(0))
	}
	if err != nil {
		return 0, fmt.Errorf("the worker to kill, process %d: %w", e.Opt.KillPID, err)
	}
	if s.held, err = holdWorkers(e, "recovery"); err != nil {
		return 0, err
	}
	s.writes = orDefault(e.Opt.Users, 10_000)
	// Many keys, so that the second worker to wake after the resume still
	// finds keys to drain: the first takes as many as it has slots (64).
	if s.events, err = seatedEvents(ctx, e, "recovery", orDefault(e.Opt.Keys, 100), s.writes); err != nil {
		_ = s.held.close()
		return 0, err
	}
	return s.writes, nil
}

func (s *recovery) Journey(ctx context.Context, e *Env, i int) error {
	_, err := s.events[i%len(s.events)].grab(ctx, e, i, true)
	return err
}

// Finish lets the workers go, follows every write to its outcome and kills
// the victim on the way.
func (s *recovery) Finish(ctx context.Context, e *Env) error {
	if err := s.held.close(); err != nil {
		return err
	}
	killing, stop := context.WithCancel(ctx)
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		s.killWhenBusy(killing, e.Opt.VictimMetrics)
	}()
	err := followAll(ctx, e, s.events, func(out client.Outcome) {
		if out.CompletedAt != nil { // a terminal outcome has one
			s.mu.Lock()
			s.done = append(s.done, *out.CompletedAt)
			s.mu.Unlock()
		}
	})
	stop()
	<-killed
	return err
}

// killWhenBusy kills the victim once it has applied a batch, as its
// /metrics tell, or, when they are not known, once a write is done; it
// gives up when ctx ends first.
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
		s.mu.Lock()
		batches, busy := 0.0, len(s.done) > 0
		s.mu.Unlock()
		if metrics != "" {
			v, err := scrapeSum(ctx, hc, metrics, victimBatches)
			batches, busy = v, err == nil && v > 0
		}
		if busy {
			s.kill = kill{at: time.Now(), batches: batches, err: s.victim.Kill()}
			return
		}
	}
}

func (s *recovery) Check(ctx context.Context, e *Env) ([]string, error) {
	out, err := checkSeated(ctx, e, s.events)
	if err != nil {
		return nil, err
	}
	r := &RecoveryReport{Writes: s.writes, Keys: len(s.events), LeaseTTLSeconds: e.Opt.LeaseTTL.Seconds(),
		Killed: !s.kill.at.IsZero() && s.kill.err == nil, VictimBatches: s.kill.batches}
	var last time.Time
	for _, t := range s.done {
		if t.After(s.kill.at) {
			r.OpenAtKill++
		}
		if t.After(last) {
			last = t
		}
	}
	switch {
	case s.kill.err != nil:
		out = append(out, fmt.Sprintf("the victim worker could not be killed: %v", s.kill.err))
	case !r.Killed:
		out = append(out, "every write was terminal before the victim worker was seen at work: it was not killed")
	case r.OpenAtKill == 0:
		out = append(out, "no write was open when the victim worker was killed: the kill did not land mid-work")
	default:
		r.AllTerminalAfterKillSeconds = round(last.Sub(s.kill.at).Seconds(), 3)
	}
	s.report = r
	return out, nil
}

func (s *recovery) recoveryReport() *RecoveryReport { return s.report }
func (s *recovery) measuresTimeOnly()               {}

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
