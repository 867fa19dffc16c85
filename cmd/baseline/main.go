// Command baseline serves the synchronous designs `make bench` compares
// holdfast with (package bench/baseline), one transaction per HTTP request:
// seed 004's first-come-first-served seat grab as one statement (-mode lean,
// its seats recreated in schema fcfs_baseline with -seats), seed 002's order
// reserve (-mode cart, schema cart_baseline), seed 000's locked hold flow
// (-mode hold, schema hold_baseline) and best-available seat holds for
// groups (-mode group, schema group_baseline); the cart, hold and group
// tables are created if missing, and the load tool writes its products,
// hotel or event into them (its -database-url). It is not part of holdfast
// and never runs in production.
//
// Settings are flags; each defaults to the environment variable named in
// its usage (baseline -h), else to a local default:
//
//	baseline -mode lean -seats 1000
//	baseline -mode hold -hold-ttl 10m
//	BASELINE_MODE=cart baseline
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/holdfast/holdfast/bench/baseline"
	"github.com/holdfast/holdfast/storage"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err) // package errors name their package already
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("baseline", flag.ContinueOnError)
	modeName := fs.String("mode", "lean", "lean, cart, hold or group (BASELINE_MODE)")
	addr := fs.String("addr", "127.0.0.1:8090", "listen address (BASELINE_ADDR)")
	dbURL := fs.String("database-url", "postgres://postgres@127.0.0.1:5432/holdfast?sslmode=disable", "Postgres URL (DATABASE_URL)")
	seats := fs.Int("seats", 0, "lean mode: recreate the schema with this many free seats at start; 0 keeps it (BASELINE_SEATS)")
	maxConns := fs.Int("pg-max-conns", 20, "Postgres pool size (PG_MAX_CONNS)")
	holdTTL := fs.Duration("hold-ttl", baseline.DefaultHoldTTL, "hold mode: how long a hold lives (HOLD_TTL, holdfast's)")
	for name, env := range map[string]string{"mode": "BASELINE_MODE", "addr": "BASELINE_ADDR", "database-url": "DATABASE_URL",
		"seats": "BASELINE_SEATS", "pg-max-conns": "PG_MAX_CONNS", "hold-ttl": "HOLD_TTL"} {
		if v := os.Getenv(env); v != "" {
			if err := fs.Set(name, v); err != nil { // a default, which the flag overrides
				return fmt.Errorf("%s: %w", env, err)
			}
		}
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	mode, err := baseline.ParseMode(*modeName)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// The same connection settings as holdfast's binaries, so that the
	// comparison is between designs, not pool sizes.
	if err := storage.EnsureDatabase(ctx, *dbURL); err != nil {
		return err
	}
	pool, err := storage.OpenPostgres(ctx, *dbURL, int32(*maxConns))
	if err != nil {
		return err
	}
	defer pool.Close()
	if mode != baseline.Lean || *seats > 0 { // the lean mode's seats are made afresh, or kept
		if err := baseline.Setup(ctx, pool, mode, baseline.DefaultSchema(mode), *seats); err != nil {
			return err
		}
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	srv, err := baseline.New(pool, baseline.Options{Mode: mode, HoldTTL: *holdTTL, Log: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Printf("baseline listening on %s mode=%s\n", ln.Addr(), mode)
	return srv.Serve(ctx, ln)
}
