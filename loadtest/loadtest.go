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
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
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
	// VictimMetrics, that worker's /metrics, tells when it is at work (both
	// required); LeaseTTL is the workers' LEASE_TTL, reported beside the
	// recovery time (0: not known).
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
func Names() []string { return slices.Sorted(maps.Keys(Scenarios)) }

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
	return e.base.WithToken(tok), err
}

// User returns a client for the run's user i (a role "user" principal).
func (e *Env) User(i int) (*client.Client, string, error) {
	tok, err := e.token(i)
	return e.users[i%len(e.users)].WithToken(tok), e.userID(i), err
}

// token is user i's token: issued before the run (signIn), or now.
func (e *Env) token(i int) (string, error) {
	if i < len(e.tokens) {
		return e.tokens[i], nil
	}
	return e.signer.Issue(e.userID(i), domain.RoleUser, time.Now(), 2*time.Hour)
}

func (e *Env) userID(i int) string { return fmt.Sprintf("%s-%d", e.RunID, i) }

// signIn issues the tokens of users 0 … n-1 ahead of the run: users of a
// rush signed in before it, and signing inside the measured window would
// charge the machine for work the synchronous baselines' clients (which
// name their user in a header) never do.
func (e *Env) signIn(n int) error {
	for i := len(e.tokens); i < n; i++ {
		tok, err := e.token(i)
		if err != nil {
			return err
		}
		e.tokens = append(e.tokens, tok)
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
			select {
			case <-time.After(max(ae.RetryAfter, 50*time.Millisecond)):
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
	e.Rec.Read(kind, time.Since(start), err)
	return err
}

// Optional parts of a scenario, found by a type assertion.
type (
	// finisher runs after the journeys, inside the measured phase: it
	// follows what the journeys only submitted.
	finisher interface {
		Finish(context.Context, *Env) error
	}
	// reporter adds what the scenario measured of its own to the report.
	reporter interface{ report(*Report) }
	// timeOnly scenarios measure time alone and leave their deferred tasks
	// be: recovery's killed worker keeps some of them active until Asynq's
	// recoverer frees them, a minute or more later.
	timeOnly interface{ measuresTimeOnly() }
)

// Run sets up the scenario, runs its journeys and checks its invariants.
func Run(ctx context.Context, name string, opt Options) (*Report, error) {
	mk, ok := Scenarios[name]
	if !ok {
		return nil, fmt.Errorf("unknown scenario %q (have %s)", name, strings.Join(Names(), ", "))
	}
	if opt.Concurrency <= 0 {
		opt.Concurrency = 200
	}
	e, err := newEnv(opt)
	if err != nil {
		return nil, err
	}
	sc := mk()
	fin, submitsFirst := sc.(finisher)
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
	peaks := watchMemory(ctx, opt.MetricsURLs)
	cpu := startCPU(ctx, opt.MetricsURLs)
	e.Rec.Start()
	failures := runJourneys(ctx, e, sc, total)
	thaw()
	var submitCPU map[string]float64
	if submitsFirst {
		submitCPU = cpu.read(ctx)
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
	if fin != nil {
		if err := fin.Finish(ctx, e); err != nil {
			failures.add(err)
		}
	}
	e.Rec.Stop()
	rssPeaks, cpuSeconds := peaks(), cpu.read(ctx)
	violations, err := sc.Check(ctx, e)
	if err != nil {
		return nil, fmt.Errorf("%s check: %w", name, err)
	}
	if failures.n > 0 {
		violations = append(violations, fmt.Sprintf("%d journeys ended in an error; the first: %v", failures.n, failures.first))
	}
	rep := e.Rec.Report(name, opt, total, rssPeaks, append(violations, e.Rec.LostViolations()...))
	rep.CPUSeconds, rep.SubmitCPUSeconds, rep.Applying = cpuSeconds, submitCPU, applying
	if r, ok := sc.(reporter); ok {
		r.report(rep)
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
	if _, ok := sc.(timeOnly); opt.RedisURL != "" && !ok {
		if rep.Deferred, err = runDeferred(ctx, opt.RedisURL, holdfastQueues, opt.MetricsURLs); err != nil {
			rep.Deferred = &Deferred{Error: err.Error()}
		}
	}
	return rep, nil
}

// newEnv makes a run's environment: its HTTP client, an admin, and a
// client for each API.
func newEnv(opt Options) (*Env, error) {
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
	e.Admin, err = e.As(e.RunID+"-admin", domain.RoleAdmin)
	return e, err
}

// failures counts the journeys that ended in an error, and keeps the first.
type failures struct {
	mu    sync.Mutex
	n     int
	first error
}

func (f *failures) add(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n++; f.n == 1 {
		f.first = err
	}
}

// runJourneys runs journeys 0 … total-1 of sc on e's clients.
func runJourneys(ctx context.Context, e *Env, sc Scenario, total int) *failures {
	var next atomic.Int64
	f := &failures{}
	var wg sync.WaitGroup
	for range min(e.Opt.Concurrency, max(total, 1)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < total && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				if err := sc.Journey(ctx, e, i); err != nil {
					f.add(err)
				}
			}
		})
	}
	wg.Wait()
	return f
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
	return sync.OnceFunc(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }), nil
}
