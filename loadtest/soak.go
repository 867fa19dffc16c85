package loadtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast/holdfast/client"
)

// soak: probe writes at a steady Rate (default 300/s) for Duration
// (default 5 min), each on a serialization key never used before and each
// followed to its outcome, while a sampler records every SampleEvery
// (default 30 s) what the run leaves behind: the API's and the worker's
// resident memory and heap in use, Redis' used_memory and key count, and
// the size and rows of the tables that grow with requests and keys (see
// soakSampler). A baseline sample is taken before the first write; with
// Idle, sampling goes on that long after the last write, so keys can go
// idle and retention pass. The report has the samples and the checks of
// issue 20 computed from them (SoakReport); a failing check is a violation.
//
// Its writers are Rate users, each writing about once a second, well under
// the API's default per-user limit, so the keys grow and the users do not.
type soak struct {
	rate      int
	duration  time.Duration
	every     time.Duration
	idle      time.Duration
	retention time.Duration
	warmUp    time.Duration
	total     int
	sampler   *soakSampler

	keys    atomic.Int64 // writes the API accepted: each is a new key
	once    sync.Once
	t0      time.Time // the first write's scheduled start
	stopped chan struct{}
	ticks   sync.WaitGroup
	idling  atomic.Bool

	mu      sync.Mutex
	samples []timedSample
	report  *SoakReport
}

// timedSample is a sample with its wall time, which becomes seconds since
// the first write once that is known.
type timedSample struct {
	at time.Time
	s  SoakSample
}

// Soak sampling phases.
const (
	PhaseBaseline = "baseline" // before the first write
	PhaseWrites   = "writes"   // while writing, and the sample as the last write ended
	PhaseIdle     = "idle"     // after the last write (Options.Idle)
)

func (s *soak) Setup(ctx context.Context, e *Env) (int, error) {
	s.rate, s.duration, s.every = orDefault(e.Opt.Rate, 300), e.Opt.Duration, e.Opt.SampleEvery
	if s.duration <= 0 {
		s.duration = 5 * time.Minute
	}
	if s.every <= 0 {
		s.every = 30 * time.Second
	}
	s.idle, s.retention, s.warmUp = max(e.Opt.Idle, 0), max(e.Opt.Retention, 0), max(e.Opt.WarmUp, 0)
	s.total = int(float64(s.rate) * s.duration.Seconds())
	if s.total < 1 {
		return 0, fmt.Errorf("soak: -rate %d for -duration %s is not one write", s.rate, s.duration)
	}
	var err error
	if s.sampler, err = newSoakSampler(ctx, e.Opt.MetricsURLs, e.Opt.RedisURL, e.Opt.DatabaseURL); err != nil {
		return 0, err
	}
	s.stopped = make(chan struct{})
	s.record(ctx, PhaseBaseline)
	return s.total, nil
}

// record takes a sample now.
func (s *soak) record(ctx context.Context, phase string) {
	at := time.Now()
	smp := s.sampler.take(ctx, phase, int(s.keys.Load()))
	s.mu.Lock()
	s.samples = append(s.samples, timedSample{at: at, s: smp})
	s.mu.Unlock()
}

// lastAt is when the latest sample was taken.
func (s *soak) lastAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples[len(s.samples)-1].at
}

// sample takes a sample every s.every from the first write until Check
// stops it.
func (s *soak) sample(ctx context.Context) {
	defer s.ticks.Done()
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			phase := PhaseWrites
			if s.idling.Load() {
				phase = PhaseIdle
			}
			s.record(ctx, phase)
		case <-s.stopped:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (s *soak) Journey(ctx context.Context, e *Env, i int) error {
	s.once.Do(func() {
		s.t0 = time.Now()
		s.ticks.Add(1)
		go s.sample(ctx)
	})
	// Write i starts i/rate seconds after the first; a run that falls
	// behind catches up as fast as its clients can.
	if wait := time.Until(s.t0.Add(time.Duration(i) * time.Second / time.Duration(s.rate))); wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c, _, err := e.User(i % s.rate)
	if err != nil {
		return err
	}
	key := fmt.Sprintf("%s-%d", e.RunID, i)
	out, err := e.Write(ctx, c, "probe", func(ctx context.Context) (client.Accepted, error) {
		acc, err := c.Probe(ctx, []string{key})
		if err == nil && !acc.Replayed {
			s.keys.Add(1)
		}
		return acc, err
	})
	if err != nil {
		return err
	}
	if err := out.Err(); err != nil {
		return fmt.Errorf("probe on new key %s: %w", key, err)
	}
	return nil
}

// Check samples as the writes end, goes on sampling through the idle wait,
// and computes the checks from the samples.
func (s *soak) Check(ctx context.Context, e *Env) ([]string, error) {
	defer s.sampler.close()
	started := !s.t0.IsZero()
	writes := time.Since(s.t0)
	if !started {
		writes = 0
	}
	s.record(ctx, PhaseWrites)
	s.idling.Store(true)
	var err error
	if s.idle > 0 {
		select {
		case <-time.After(s.idle):
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	close(s.stopped)
	s.ticks.Wait()
	if s.idle > 0 && err == nil && time.Since(s.lastAt()) > s.every/10 { // unless a tick just took it
		s.record(ctx, PhaseIdle)
	}
	if err != nil {
		return nil, fmt.Errorf("soak: idle wait: %w", err)
	}
	s.report = s.build(writes)
	return s.report.Violations(), nil
}

// build turns the samples into the report and computes its checks.
func (s *soak) build(writes time.Duration) *SoakReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	slices.SortStableFunc(s.samples, func(a, b timedSample) int { return a.at.Compare(b.at) })
	t0 := s.t0
	if t0.IsZero() && len(s.samples) > 0 {
		t0 = s.samples[0].at
	}
	r := &SoakReport{Rate: s.rate, WriteSeconds: round(writes.Seconds(), 1), IdleSeconds: s.idle.Seconds(),
		SampleEverySeconds: s.every.Seconds(), RetentionSeconds: s.retention.Seconds(), WarmUpSeconds: s.warmUp.Seconds()}
	for _, ts := range s.samples {
		ts.s.Seconds = round(ts.at.Sub(t0).Seconds(), 1)
		r.Samples = append(r.Samples, ts.s)
	}
	if writes > 0 {
		r.WriteRate = round(float64(s.keys.Load())/writes.Seconds(), 1)
	}
	r.Checks = r.check()
	return r
}

func (s *soak) soakReport() *SoakReport { return s.report }
