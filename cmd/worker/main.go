// Command worker applies holdfast's writes: it loads the configuration and
// runs the worker cmd/wiring.Worker builds from it (the composition
// root, which the tests start too); worker --version prints the build.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/holdfast/holdfast/cmd/wiring"
	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/internal/buildinfo"
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
	if err := (&wiring.Worker{Config: cfg, Log: cfg.Logger(os.Stdout)}).Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}
