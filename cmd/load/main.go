// Command load drives a running holdfast with a rush of virtual users and
// reports throughput, latency, outcomes, peak memory, CPU and an invariant
// verdict; docs/benchmarks.md describes each scenario.
//
//	load [flags] SCENARIO
//	load floor [-redis URL] [-tasks N]   raw Asynq throughput, as JSON
//	load table DIR                       the make bench table from a run's JSON files
//
// Against holdfast: fcfs-rush, hold-storm, cart-checkout, cart-rush,
// group-rush, availability-read, idle-streams (make streams), soak (make
// soak), isolation and recovery; against cmd/baseline: baseline-fcfs,
// baseline-cart, baseline-hold-storm and baseline-group-rush. The tool
// mints its own tokens, so it needs the API's JWT_SECRET (from the
// environment or -secret). It exits 1 when an invariant is violated.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/holdfast/holdfast/loadtest"
)

func main() {
	code, err := run(os.Args[1:], os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
	}
	os.Exit(code)
}

func run(args []string, stdout, stderr io.Writer) (int, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) > 0 {
		switch args[0] {
		case "floor":
			return floorCmd(ctx, args[1:], stdout, stderr)
		case "table":
			return tableCmd(args[1:], stdout)
		}
	}
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: load [flags] SCENARIO | load floor [flags] | load table DIR\n\nscenarios: %s\n\nflags:\n", strings.Join(loadtest.Names(), ", "))
		fs.PrintDefaults()
	}
	var opt loadtest.Options
	fs.StringVar(&opt.BaseURL, "url", envOr("HOLDFAST_URL", "http://127.0.0.1:8080"), "API base URL (HOLDFAST_URL)")
	fs.StringVar(&opt.Secret, "secret", os.Getenv("JWT_SECRET"), "the API's JWT secret (JWT_SECRET)")
	fs.IntVar(&opt.Concurrency, "concurrency", 200, "virtual clients at once")
	fs.IntVar(&opt.Users, "users", 0, "journeys (0: the scenario's default)")
	fs.IntVar(&opt.Seats, "seats", 0, "seats of the event: fcfs-rush, baseline-fcfs, group-rush (0: default)")
	fs.IntVar(&opt.Stock, "stock", 0, "cart-rush, baseline-cart: units of each hot option (0: 300)")
	fs.IntVar(&opt.HotOptions, "hot-options", 5, "cart-rush, baseline-cart: hot options of the drop; 1: every cart is one unit of one option")
	fs.IntVar(&opt.CartTail, "cart-tail", 0, "cart-rush, baseline-cart: each cart also holds one of this many options of an older product (0: none)")
	fs.DurationVar(&opt.Duration, "hold", 0, "idle-streams: how long to hold every stream open (0: 60s); needs -concurrency ≥ -users")
	fs.Uint64Var(&opt.Seed, "seed", 1, "seed of the random choices")
	fs.IntVar(&opt.SeatHoldSeconds, "seat-hold-seconds", 0, "group-rush, baseline-group-rush: how long the event's holds last (0: 5)")
	fs.StringVar(&opt.RedisURL, "redis", "", "holdfast's Redis URL: after the run, fire the Asynq tasks it left scheduled and measure their CPU; soak: sample its memory and keys")
	fs.DurationVar(&opt.Duration, "duration", 0, "soak: how long to write (0: 5m)")
	fs.IntVar(&opt.Rate, "rate", 300, "soak: writes per second, each on a new key")
	fs.DurationVar(&opt.SampleEvery, "sample-every", 30*time.Second, "soak: how often to sample memory, Redis and table sizes")
	fs.DurationVar(&opt.WarmUp, "warm-up", 0, "soak: memory must hold from this far into the writes on (0: a fifth of -duration)")
	fs.DurationVar(&opt.Idle, "idle", 0, "soak: keep sampling this long after the last write, then check Redis against its baseline")
	fs.DurationVar(&opt.Retention, "retention", 0, "soak: the system's REQUEST_RETENTION, to check the requests rows against (0: not checked)")
	fs.StringVar(&opt.DatabaseURL, "database-url", "", "soak: holdfast's Postgres, to sample its table sizes ('' to skip); group-rush, baseline-cart, baseline-hold-storm, baseline-group-rush: the design's Postgres, for the checks and a baseline's fixture, its search_path the mode's schema (required)")
	fs.DurationVar(&opt.PreferWait, "prefer-wait", 10*time.Second, "writes ask for their outcome in the answer (Prefer: wait=N): one HTTP exchange a write; 0 submits, then polls")
	fs.BoolVar(&opt.Intake, "intake", false, "fcfs-rush: submit everything first, then follow the outcomes (measures intake)")
	fs.IntVar(&opt.Keys, "keys", 0, "isolation: other events its other clients write on (0: 10); recovery: events its writes spread over (0: 100)")
	fs.IntVar(&opt.OtherClients, "other-clients", 0, "isolation: clients writing on other keys while the hot key's backlog (-users) drains (0: 4)")
	fs.IntVar(&opt.OtherWrites, "other-writes", 0, "isolation: writes of each other client, one at a time (0: 25)")
	fs.IntVar(&opt.KillPID, "kill-pid", 0, "recovery: the worker process to kill with SIGKILL mid-work")
	fs.StringVar(&opt.VictimMetrics, "victim-metrics", "", "recovery: that worker's /metrics, to kill it once it has applied a batch")
	fs.DurationVar(&opt.LeaseTTL, "lease-ttl", 0, "recovery: the workers' LEASE_TTL, reported beside the recovery time (0: not known)")
	fs.IntVar(&opt.RedisAwayPID, "redis-away", 0, "with -intake (and no -redis): holdfast's Redis server process, frozen (SIGSTOP) while the clients submit, thawed before the outcomes are followed")
	fs.BoolVar(&opt.HoldApply, "hold-apply", false, "with -intake and -redis: pause holdfast's queues until every client has submitted (the API's intake with the workers idle; never on a live system)")
	workerMetrics := fs.String("worker-metrics", envOr("HOLDFAST_WORKER_METRICS", "http://127.0.0.1:8081/metrics"), "the worker's /metrics for peak memory ('' to skip)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	timeout := fs.Duration("timeout", 30*time.Minute, "give the run up after this long (0: never): a write that never ends fails the run instead of holding it forever")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, nil
		}
		return 2, nil
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2, nil
	}
	if opt.HotOptions < 1 {
		return 2, fmt.Errorf("-hot-options must be at least 1, not %d", opt.HotOptions)
	}
	if opt.Secret == "" {
		return 2, errors.New("set JWT_SECRET (or -secret) to the API's secret")
	}
	// The API's (or the synchronous server's) /metrics: its memory and CPU.
	opt.MetricsURLs = map[string]string{"api": strings.TrimRight(opt.BaseURL, "/") + "/metrics"}
	if *workerMetrics != "" {
		opt.MetricsURLs["worker"] = *workerMetrics
	}
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	rep, err := loadtest.Run(ctx, fs.Arg(0), opt)
	if err != nil {
		return 1, err
	}
	if *asJSON {
		if err := rep.WriteJSON(stdout); err != nil {
			return 1, err
		}
	} else {
		rep.WriteText(stdout)
	}
	if !rep.OK {
		return 1, nil
	}
	return 0, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
