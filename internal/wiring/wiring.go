// Package wiring maps the configuration onto the options of the parts the
// binaries and the test systems build alike, so that each mapping is
// written once and the parts themselves do not read the configuration.
package wiring

import (
	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/keyed"
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
