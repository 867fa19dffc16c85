// Command worker applies holdfast's writes (see package worker);
// worker --version prints the build.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/internal/buildinfo"
	"github.com/holdfast/holdfast/probe"
	"github.com/holdfast/holdfast/shop"
	"github.com/holdfast/holdfast/stays"
	"github.com/holdfast/holdfast/worker"
)

func main() {
	if buildinfo.Asked(os.Args[1:]) {
		fmt.Println(buildinfo.Read())
		return
	}
	cfg, err := config.Load()
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	modules := []worker.Types{stays.Worker(cfg.HoldTTL, cfg.HoldLockWait, cfg.HoldWritesTogether), shop.Worker(cfg.ReservationTTL), events.Worker(cfg.FCFSLockWait, cfg.EventsReconcile, cfg.JWTSecret)}
	if cfg.EnableProbe {
		modules = append(modules, probe.Types)
	}
	if err := worker.Run(ctx, cfg, cfg.Logger(os.Stdout), worker.Options{}, modules...); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}
