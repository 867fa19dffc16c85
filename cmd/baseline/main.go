// Command baseline serves the comparison point for `make bench`: seed 004's
// first-come-first-served seat grab done synchronously inside each HTTP
// request, deliberately the seed's design (see package bench/baseline), an
// HTTP handler that only enqueues an Asynq task, one that makes each
// request durable in Postgres and then enqueues its task, or that plus a
// long poll for the task's outcome and, in a process of its own, the tasks'
// worker (a write's round trip built the plain way); or seed 002's order
// reserve done synchronously, one transaction per request (-mode cart, its
// tables created in schema cart_baseline if missing, its products created
// over HTTP by the load tool); or seed 000's locked hold flow done
// synchronously, one transaction per request (-mode hold, its tables in
// schema hold_baseline, its hotel created over HTTP by the load tool); or
// best-available seat holds for groups done synchronously, one transaction
// per request that locks a row of the seat map (-mode group, or
// group-skiplocked, its tables in schema group_baseline, its event created
// over HTTP by the load tool). It is not part of holdfast and never runs in
// production.
//
// Settings are flags; each defaults to the environment variable named in
// its usage (baseline -h), else to a local default:
//
//	baseline -mode skiplocked -seats 1000
//	baseline -mode cart
//	baseline -mode hold -hold-ttl 10m
//	baseline -mode group-skiplocked
//	BASELINE_MODE=enqueue baseline
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
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/bench/baseline"
	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/storage"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err) // package errors name their package already
		os.Exit(1)
	}
}

func run(args []string) error {
	defSeats, err := envInt("BASELINE_SEATS", 0)
	if err != nil {
		return err
	}
	defConns, err := envInt("PG_MAX_CONNS", 20)
	if err != nil {
		return err
	}
	defTTL := baseline.DefaultHoldTTL
	if v := os.Getenv("HOLD_TTL"); v != "" {
		if defTTL, err = time.ParseDuration(v); err != nil {
			return fmt.Errorf("HOLD_TTL: %w", err)
		}
	}
	fs := flag.NewFlagSet("baseline", flag.ContinueOnError)
	modeName := fs.String("mode", env("BASELINE_MODE", "literal"), "literal, skiplocked, lean, enqueue, durable, roundtrip, roundtrip-tasks, cart, hold, group or group-skiplocked (BASELINE_MODE)")
	addr := fs.String("addr", env("BASELINE_ADDR", "127.0.0.1:8090"), "listen address (BASELINE_ADDR)")
	dbURL := fs.String("database-url", env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/holdfast?sslmode=disable"), "Postgres URL (DATABASE_URL)")
	redisURL := fs.String("redis-url", env("REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL (REDIS_URL)")
	seats := fs.Int("seats", defSeats, "recreate the schema with this many free seats at start; 0 keeps it (BASELINE_SEATS)")
	maxConns := fs.Int("pg-max-conns", defConns, "Postgres pool size (PG_MAX_CONNS)")
	holdTTL := fs.Duration("hold-ttl", defTTL, "hold mode: how long a hold lives (HOLD_TTL, holdfast's)")
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
	rdb, err := storage.OpenRedis(ctx, config.Redis{URL: *redisURL})
	if err != nil {
		return err
	}
	defer rdb.Close()
	var pool *pgxpool.Pool
	if mode.UsesPostgres() {
		if err := storage.EnsureDatabase(ctx, *dbURL); err != nil {
			return err
		}
		if pool, err = storage.OpenPostgres(ctx, *dbURL, int32(*maxConns)); err != nil {
			return err
		}
		defer pool.Close()
		if mode.StoresRequests() {
			if err := storage.Migrate(ctx, pool); err != nil {
				return err
			}
		}
		if err := setupSchema(ctx, pool, mode, *seats); err != nil {
			return err
		}
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	srv, err := baseline.New(pool, rdb, baseline.Options{Mode: mode, HoldTTL: *holdTTL, Log: log})
	if err != nil {
		return err
	}
	defer func() {
		if err := srv.Close(); err != nil {
			log.Warn("close", "err", err)
		}
	}()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Printf("baseline listening on %s mode=%s\n", ln.Addr(), mode)
	return srv.Serve(ctx, ln)
}

// setupSchema prepares the tables of a mode that keeps its own: the cart
// and hold modes' are created if missing, the seats recreated when seats > 0.
func setupSchema(ctx context.Context, pool *pgxpool.Pool, mode baseline.Mode, seats int) error {
	switch {
	case mode == baseline.Cart:
		return baseline.SetupCart(ctx, pool, baseline.DefaultCartSchema)
	case mode == baseline.Holds:
		return baseline.SetupHold(ctx, pool, baseline.DefaultHoldSchema)
	case mode == baseline.Group || mode == baseline.GroupSkipLocked:
		return baseline.SetupGroup(ctx, pool, baseline.DefaultGroupSchema)
	case seats > 0 && !mode.StoresRequests():
		return baseline.Setup(ctx, pool, baseline.DefaultSchema, seats)
	}
	return nil
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return n, nil
}
