// Command api is holdfast's HTTP API. Subcommands:
//
//	api                       serve (HTTP_ADDR): the API cmd/wiring.API builds
//	api --version             print the build: version, VCS revision, Go version
//	api token -sub 42 -role user [-ttl 24h]   print a dev JWT signed with JWT_SECRET
//	api migrate               apply migrations and exit
//	api seed                  load the demo data (idempotent); prints shell exports of its ids
//	api verify-prequeue -event 7 [-user 42] [-url http://127.0.0.1:8080] [-order]
//	                          recompute an event's pre-queue order from its public data
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/holdfast/holdfast/auth"
	"github.com/holdfast/holdfast/cmd/wiring"
	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/internal/buildinfo"
	"github.com/holdfast/holdfast/shop"
	"github.com/holdfast/holdfast/stays"
	"github.com/holdfast/holdfast/storage"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if buildinfo.Asked(args) {
		fmt.Println(buildinfo.Read())
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) > 0 && args[0] == "verify-prequeue" { // needs no configuration: public data only
		return verifyPrequeue(ctx, args[1:], os.Stdout)
	}
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	if len(args) > 0 {
		switch args[0] {
		case "token":
			return token(cfg, args[1:])
		case "migrate":
			return migrate(ctx, cfg)
		case "seed":
			return seed(ctx, cfg)
		default:
			return fmt.Errorf("unknown command %q (want token, migrate, seed, verify-prequeue or --version)", args[0])
		}
	}
	return (&wiring.API{Config: cfg, Log: cfg.Logger(os.Stdout)}).Run(ctx)
}

func token(cfg config.Config, args []string) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	sub := fs.String("sub", "", "user id (JWT sub)")
	role := fs.String("role", "user", "user, staff or admin")
	ttl := fs.Duration("ttl", 24*time.Hour, "lifetime")
	if err := fs.Parse(args); err != nil {
		return err
	}
	r, err := domain.ParseRole(*role)
	if err != nil {
		return err
	}
	t, err := auth.NewSigner(cfg.JWTSecret).Issue(*sub, r, time.Now(), *ttl)
	if err != nil {
		return err
	}
	fmt.Println(t)
	return nil
}

func migrate(ctx context.Context, cfg config.Config) error {
	if err := storage.EnsureDatabase(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	pool, err := storage.OpenPostgres(ctx, cfg.DatabaseURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	return storage.Migrate(ctx, pool)
}

func seed(ctx context.Context, cfg config.Config) error {
	if err := migrate(ctx, cfg); err != nil {
		return err
	}
	pool, err := storage.OpenPostgres(ctx, cfg.DatabaseURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	d, err := stays.SeedDemo(ctx, pool)
	if err != nil {
		return err
	}
	sd, err := shop.SeedDemo(ctx, pool)
	if err != nil {
		return err
	}
	ev, err := events.SeedDemo(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Printf("export DEMO_HOTEL_ID=%d DEMO_ROOM_TYPE_ID=%d DEMO_SHOP_USER_ID=%d DEMO_OPTION_ID=%d DEMO_EVENT_ID=%d\n",
		d.HotelID, d.RoomTypeIDs[0], sd.UserID, sd.OptionID, ev)
	return nil
}
