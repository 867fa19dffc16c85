// Command worker applies holdfast's writes (see package worker).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/probe"
	"github.com/holdfast/holdfast/worker"
)

func main() {
	cfg, err := config.Load()
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var types []keyed.Type
	if cfg.EnableProbe {
		types = append(types, probe.Type())
	}
	if err := worker.Run(ctx, cfg, cfg.Logger(os.Stdout), worker.Options{}, types...); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}
