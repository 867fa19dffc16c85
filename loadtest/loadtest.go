// Package loadtest drives a running holdfast over HTTP with many virtual
// users, follows every request to a terminal state, checks the scenario's
// invariants at the end and reports throughput, latency, outcomes and the
// peak memory of the API and the worker.
//
// A scenario sets up its own fixtures through the API (with an admin token it
// mints from the shared JWT secret), then runs Users journeys on Concurrency
// virtual clients. A client runs one journey at a time: it submits a write,
// long-polls its outcome and only then moves on, as a person at a browser
// would. The tool talks to the API only through package client.
package loadtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/holdfast/holdfast/auth"
	"github.com/holdfast/holdfast/client"
	"github.com/holdfast/holdfast/domain"
)

// Options configure a run. Zero values take the scenario's defaults.
type Options struct {
	BaseURL string // the API, e.g. http://127.0.0.1:8080
	// MoreAPIs are more API processes of the same system: user i's journey
	// calls API i mod (1 + len(MoreAPIs)), BaseURL being the first.
	MoreAPIs    []string
	Secret      string // JWT_SECRET of the API, to mint tokens
	Concurrency int    // virtual clients running at once
	Users       int    // journeys in all
	Seats       int    // fcfs-rush, baseline-fcfs, group-rush: seats of the event
	Stock       int    // cart-rush, baseline-cart: units of each option
	// HotOptions, for cart-rush and baseline-cart, is how many options the
	// drop has (0: 5); with 1, every cart is one unit of that one option.
	HotOptions int
	// CartTail, for cart-rush and baseline-cart, is the options of an older
	// catalog product, created before the drop: each cart also holds one
	// of them (0: none). Their keys sort before the drop's in about half
	// the carts, as the option ids compare as strings.
	CartTail int
	// Duration is how long idle-streams holds its streams open, and how
	// long soak writes.
	Duration time.Duration
	// soak: writes per second (Rate), a sample every SampleEvery, sampling
	// on for Idle after the last write; Retention is the system's
	// REQUEST_RETENTION, for the check of the requests table's rows; and
	// DatabaseURL is holdfast's Postgres, whose tables are sampled (none
	// when empty). group-rush, baseline-cart, baseline-hold-storm and
	// baseline-group-rush need DatabaseURL: their checks read the design's
	// tables there, and a baseline's fixture is written there (its mode's
	// schema through the URL's search_path).
	Rate        int
	SampleEvery time.Duration
	WarmUp      time.Duration // soak: memory must hold after this (0: a fifth of Duration)
	Idle        time.Duration
	Retention   time.Duration
	DatabaseURL string
	Seed        uint64 // random choices (room types, dates, carts, groups)
	// SeatHoldSeconds, for group-rush and baseline-group-rush, is how long
	// the event's holds last (0: 5).
	SeatHoldSeconds int
	// MetricsURLs are scraped for process_resident_memory_bytes while the
	// scenario runs, by name ("api", "worker").
	MetricsURLs map[string]string
	// Intake, for fcfs-rush, only submits: clients
	// do not wait for outcomes while submitting, so the report's accepted/s
	// is the API's intake rate.
	// Every request is still followed to its terminal state afterwards.
	Intake bool
	// PreferWait, when 1 s or more, has every write ask the API to answer
	// with its outcome (Prefer: wait=N): a journey's write is then one HTTP
	// exchange instead of a submit and a poll. Not with Intake.
	PreferWait time.Duration
	// RedisURL, when set, is the Redis holdfast's queues live on: after the
	// run the tool runs the tasks the run left deferred and measures them
	// (Report.Deferred). With Intake, the report also counts the tasks the
	// workers processed while clients submitted (Report.Applying).
	RedisURL string
	// HoldApply, with Intake and RedisURL, pauses holdfast's queues while
	// the clients submit and resumes them before following the outcomes:
	// the API's intake with the workers idle (see Applying). Not for a
	// live system: while the run submits, nothing is applied.
	HoldApply bool
	// RedisAwayPID, with Intake, is holdfast's Redis server process: it is
	// frozen (SIGSTOP) from before the first write until every client has
	// submitted, then thawed (SIGCONT) before the outcomes are followed,
	// so the run measures the API's intake while Redis does not answer.
	RedisAwayPID int
	// Keys, for isolation, is the other events its other clients write on
	// (0: 10); for recovery, the events its writes spread over (0: 100).
	Keys int
	// isolation: OtherClients clients (0: 4) each send OtherWrites writes
	// (0: 25) on the other keys while the hot key's backlog drains.
	OtherClients, OtherWrites int
	// recovery: KillPID is the worker process it kills with SIGKILL mid-work;
	// VictimMetrics, that worker's /metrics, tells when it is at work (''
	// kills it once the first write is done); LeaseTTL is the workers'
	// LEASE_TTL, reported beside the recovery time (0: not known).
	KillPID       int
	VictimMetrics string
	LeaseTTL      time.Duration
}

// Scenario is one kind of rush.
type Scenario interface {
	// Setup creates the fixtures through the API and returns the number of
	// journeys to run.
	Setup(ctx context.Context, e *Env) (int, error)
	// Journey runs user i's journey.
	Journey(ctx context.Context, e *Env, i int) error
	// Check verifies the invariants once every journey has ended; each
	// returned string is a violation.
	Check(ctx context.Context, e *Env) ([]string, error)
}

// Scenarios are the scenarios by name.
var Scenarios = map[string]func() Scenario{
	"fcfs-rush":         func() Scenario { return &fcfsRush{} },
	"hold-storm":        func() Scenario { return &holdStorm{} },
	"cart-checkout":     func() Scenario { return &cartCheckout{} },
	"cart-rush":         func() Scenario { return &cartRush{} },
	"availability-read": func() Scenario { return &availabilityRead{} },
	"idle-streams":      func() Scenario { return &idleStreams{} },
	"soak":              func() Scenario { return &soak{} },
	"isolation":         func() Scenario { return &isolation{} },
	"recovery":          func() Scenario { return &recovery{} },
	// Comparison points for make bench, served by cmd/baseline.
	"baseline-fcfs":       func() Scenario { return &baselineFCFS{} },
	"baseline-cart":       func() Scenario { return &baselineCart{} },
	"baseline-hold-storm": func() Scenario { return &baselineHoldStorm{} },
	"group-rush":          func() Scenario { return &groupRush{} },
	"baseline-group-rush": func() Scenario { return &baselineGroupRush{} },
}

// Names lists the scenarios in order.
func Names() []string {
	out := make([]string, 0, len(Scenarios))
	for n := range Scenarios {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Env is what a scenario works with.
type Env struct {
	Opt   Options
	Admin *client.Client // an admin principal
	Rec   *Recorder
	// RunID makes this run's user ids and fixture names unique, so runs can
	// share a database.
	RunID string
	// hc is the run's HTTP client, on a transport of its own (fastTransport),
	// under package client and the baselines' plain posts alike.
	hc     *http.Client
	base   *client.Client
	users  []*client.Client // base and one per MoreAPIs
	signer *auth.Signer
	tokens []string // users' tokens, issued before the run (signIn)
	rngMu  sync.Mutex
	rng    *rand.Rand
}

// As returns a client acting as user sub with role.
func (e *Env) As(sub string, role domain.Role) (*client.Client, error) {
	tok, err := e.signer.Issue(sub, role, time.Now(), 2*time.Hour)
	if err != nil {
		return nil, err
	}
	return e.base.WithToken(tok), nil
}

// User returns a client for the run's user i (a role "user" principal).
func (e *Env) User(i int) (*client.Client, string, error) {
	sub := e.userID(i)
	base := e.users[i%len(e.users)]
	if i < len(e.tokens) {
		return base.WithToken(e.tokens[i]), sub, nil
	}
	tok, err := e.signer.Issue(sub, domain.RoleUser, time.Now(), 2*time.Hour)
	if err != nil {
		return nil, sub, err
	}
	return base.WithToken(tok), sub, nil
}

func (e *Env) userID(i int) string { return fmt.Sprintf("%s-%d", e.RunID, i) }

// signIn issues the tokens of users 0 … n-1 ahead of the run: users of a
// rush signed in before it, and signing inside the measured window would
// charge the machine for work the synchronous baselines' clients (which
// name their user in a header) never do.
func (e *Env) signIn(n int) error {
	e.tokens = make([]string, n)
	for i := range e.tokens {
		tok, err := e.signer.Issue(e.userID(i), domain.RoleUser, time.Now(), 2*time.Hour)
		if err != nil {
			return err
		}
		e.tokens[i] = tok
	}
	return nil
}

// IntN is a random int in [0, n), from the run's seeded source.
func (e *Env) IntN(n int) int {
	e.rngMu.Lock()
	defer e.rngMu.Unlock()
	return e.rng.IntN(n)
}

// Write submits one write (retrying on 429 after its Retry-After), waits
// for its outcome and records both. A transport error or a 4xx other than
// 429 is returned; business outcomes are in the Outcome.
func (e *Env) Write(ctx context.Context, c *client.Client, kind string, submit func(context.Context) (client.Accepted, error)) (client.Outcome, error) {
	acc, at, err := e.submit(ctx, kind, submit)
	if err != nil {
		return client.Outcome{}, err
	}
	return e.await(ctx, c, kind, acc, at)
}

func (e *Env) submit(ctx context.Context, kind string, submit func(context.Context) (client.Accepted, error)) (client.Accepted, time.Time, error) {
	for {
		start := time.Now()
		acc, err := submit(ctx)
		took := time.Since(start)
		if err == nil {
			e.Rec.Accepted(kind, start, took)
			return acc, start, nil
		}
		var ae *client.Error
		if errors.As(err, &ae) && ae.HTTPStatus == 429 {
			e.Rec.Throttled(ae.Code)
			wait := max(ae.RetryAfter, 50*time.Millisecond)
			select {
			case <-time.After(wait):
				continue
			case <-ctx.Done():
				return acc, start, ctx.Err()
			}
		}
		e.Rec.SubmitError(kind, err)
		return acc, start, err
	}
}

func (e *Env) await(ctx context.Context, c *client.Client, kind string, acc client.Accepted, submitted time.Time) (client.Outcome, error) {
	out, err := c.Await(ctx, acc)
	if err != nil {
		e.Rec.Lost(kind, acc.RequestID, err)
		return out, err
	}
	e.Rec.Terminal(kind, submitted, out)
	return out, nil
}

// Read times one synchronous call and records it.
func (e *Env) Read(kind string, call func() error) error {
	start := time.Now()
	err := call()
	e.Rec.Read(kind, start, time.Since(start), err)
	return err
}

// Run sets up the scenario, runs its journeys and checks its invariants.
func Run(ctx context.Context, name string, opt Options) (*Report, error) {
	mk, ok := Scenarios[name]
	if !ok {
		return nil, fmt.Errorf("unknown scenario %q (have %s)", name, strings.Join(Names(), ", "))
	}
	if opt.Concurrency <= 0 {
		opt.Concurrency = 200
	}
	hc := &http.Client{Transport: newFastTransport()}
	e := &Env{Opt: opt, Rec: NewRecorder(), RunID: fmt.Sprintf("lt%x", time.Now().UnixNano()&0xffffffffff),
		hc: hc, base: client.NewWithHTTP(opt.BaseURL, "", hc), signer: auth.NewSigner(opt.Secret), rng: rand.New(rand.NewPCG(opt.Seed, 7))}
	e.users = []*client.Client{e.base}
	for _, url := range opt.MoreAPIs {
		e.users = append(e.users, client.NewWithHTTP(url, "", hc))
	}
	if !opt.Intake {
		for _, c := range e.users {
			c.PreferWait = opt.PreferWait
		}
	}
	var err error
	if e.Admin, err = e.As(e.RunID+"-admin", domain.RoleAdmin); err != nil {
		return nil, err
	}
	sc := mk()
	finisher, submitsFirst := sc.(interface {
		Finish(context.Context, *Env) error
	})
	submitsFirst = submitsFirst && opt.Intake
	if opt.HoldApply && (!submitsFirst || opt.RedisURL == "") {
		return nil, errors.New("holding the workers back needs an intake run (-intake, fcfs-rush) and holdfast's Redis (-redis)")
	}
	if opt.RedisAwayPID > 0 && (!submitsFirst || opt.RedisURL != "") {
		return nil, errors.New("freezing Redis needs an intake run (-intake, fcfs-rush), without -redis: nothing may read it meanwhile")
	}
	total, err := sc.Setup(ctx, e)
	if err != nil {
		return nil, fmt.Errorf("%s setup: %w", name, err)
	}
	if err := e.signIn(total); err != nil {
		return nil, fmt.Errorf("%s sign-in: %w", name, err)
	}
	var queues *queueWatch
	if submitsFirst && opt.RedisURL != "" {
		if queues, err = watchQueues(opt.RedisURL, holdfastQueues); err != nil {
			return nil, err
		}
		defer func() { _ = queues.close() }() // resumes what a failed run left paused
		if opt.HoldApply {
			if err := queues.pause(); err != nil {
				return nil, err
			}
		}
	}
	thaw, err := freeze(opt.RedisAwayPID)
	if err != nil {
		return nil, err
	}
	defer thaw()
	mem := watchMemory(ctx, opt.MetricsURLs)
	cpu := startCPU(ctx, opt.MetricsURLs)
	e.Rec.Start()
	var next, failed atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	for range min(opt.Concurrency, max(total, 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= total || ctx.Err() != nil {
					return
				}
				if err := sc.Journey(ctx, e, i); err != nil {
					failed.Add(1)
					errOnce.Do(func() { firstErr = err })
				}
			}
		}()
	}
	wg.Wait()
	thaw()
	var submitCPUSeconds map[string]float64
	if submitsFirst {
		submitCPUSeconds = cpu.read(ctx)
	}
	var applying *Applying
	if queues != nil {
		applying = &Applying{Held: opt.HoldApply}
		if applying.TasksWhileSubmitting, err = queues.since(); err == nil {
			err = queues.resume()
		}
		if err != nil {
			return nil, err
		}
	}
	if finisher != nil {
		if err := finisher.Finish(ctx, e); err != nil {
			failed.Add(1)
			errOnce.Do(func() { firstErr = err })
		}
	}
	e.Rec.Stop()
	peaks := mem.stop()
	cpuSeconds := cpu.read(ctx)
	violations, err := sc.Check(ctx, e)
	if err != nil {
		return nil, fmt.Errorf("%s check: %w", name, err)
	}
	if n := failed.Load(); n > 0 {
		violations = append(violations, fmt.Sprintf("%d journeys ended in an error; the first: %v", n, firstErr))
	}
	violations = append(violations, e.Rec.LostViolations()...)
	rep := e.Rec.Report(name, opt, total, peaks, violations)
	rep.CPUSeconds = cpuSeconds
	rep.Applying = applying
	if r, ok := sc.(interface{ streamsReport() *StreamsReport }); ok {
		rep.Streams = r.streamsReport()
	}
	if r, ok := sc.(interface{ cartReport() *CartReport }); ok {
		rep.Cart = r.cartReport()
	}
	if r, ok := sc.(interface{ holdReport() *HoldReport }); ok {
		rep.Hold = r.holdReport()
	}
	if r, ok := sc.(interface{ groupReport() *GroupReport }); ok {
		rep.Group = r.groupReport()
	}
	if r, ok := sc.(interface{ soakReport() *SoakReport }); ok {
		rep.Soak = r.soakReport()
	}
	if r, ok := sc.(interface{ orderReport() *OrderReport }); ok {
		rep.Order = r.orderReport()
	}
	if r, ok := sc.(interface{ isolationReport() *IsolationReport }); ok {
		rep.Isolation = r.isolationReport()
	}
	if r, ok := sc.(interface{ recoveryReport() *RecoveryReport }); ok {
		rep.Recovery = r.recoveryReport()
	}
	rep.SubmitCPUSeconds = submitCPUSeconds
	// A scenario that measures time alone leaves its deferred tasks be:
	// recovery's killed worker keeps some of them active until Asynq's
	// recoverer frees them, a minute or more later.
	_, timeOnly := sc.(interface{ measuresTimeOnly() })
	if opt.RedisURL != "" && !timeOnly {
		if rep.Deferred, err = runDeferred(ctx, opt.RedisURL, holdfastQueues, opt.MetricsURLs); err != nil {
			rep.Deferred = &Deferred{Error: err.Error()}
		}
	}
	return rep, nil
}

// freeze stops process pid with SIGSTOP (none when pid is 0) and returns
// what sends it SIGCONT, once however often it is called.
func freeze(pid int) (thaw func(), err error) {
	if pid <= 0 {
		return func() {}, nil
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, fmt.Errorf("freeze Redis, process %d: %w", pid, err)
	}
	var once sync.Once
	return func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }, nil
}
