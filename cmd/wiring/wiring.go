// Package wiring is holdfast's composition root: API and Worker build each
// binary from the configuration (stores, engine, intake, tokens, server and
// the verticals' routes; engine, the verticals' writes, Asynq servers and
// scheduler) and run it, in the spirit of wtf's cmd/wtfd Main. cmd/api and
// cmd/worker only load the configuration and call Run. Unlike Main's, Run
// blocks until its context ends and then shuts down and closes what it
// opened, in order (the API drains first), so there is no Close to call:
// main and a test each make one call for the process's whole life.
//
// It lives in cmd beside the two mains, as a package of its own rather
// than code in package main (and not under cmd/internal), because the
// end-to-end tests start the very same assembly in process
// (internal/systest): a test cannot import a main package, and nothing
// outside cmd/ can import cmd/internal. Nothing but the binaries and tests
// imports it (.golangci.yml).
package wiring

import (
	"context"

	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/storage"
)

// KeyedOptions is the keyed engine's options as cfg sets them, for the
// process named worker.
func KeyedOptions(cfg config.Config, worker string) keyed.Options {
	return keyed.Options{
		LeaseTTL: cfg.LeaseTTL, BatchMax: cfg.BatchMax, DrainSlice: cfg.DrainSlice,
		RedriveAfter: cfg.RedriveAfter, KeyCap: cfg.KeyCap, QueueCap: cfg.QueueCap,
		ForgetAfter: cfg.KeyForgetAfter, Worker: worker,
		ScheduleDeferred: !cfg.AggregateDeferred, EnqueueEach: !cfg.BatchEnqueue,
		PlainWaiting: !cfg.QuietWaiting,
	}
}

// openStores connects to Postgres and Redis and, with MIGRATE_ON_START,
// migrates. A process told to stop while it starts (waiting on the
// migration lock behind another, say) returns no stores and no error.
func openStores(ctx context.Context, cfg config.Config, opts ...storage.PGOption) (*storage.Stores, error) {
	opts = append(opts, storage.IdleTimeout(cfg.PGIdleTimeout))
	st, err := storage.Open(ctx, cfg.DatabaseURL, cfg.Redis, cfg.PGMaxConns, storage.SchemaAtStart(cfg.MigrateOnStart), opts...)
	if err != nil && ctx.Err() != nil {
		return nil, nil
	}
	return st, err
}
