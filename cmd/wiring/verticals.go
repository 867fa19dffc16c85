package wiring

import (
	"github.com/holdfast/holdfast/api"
	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/probe"
	"github.com/holdfast/holdfast/shop"
	"github.com/holdfast/holdfast/stays"
	"github.com/holdfast/holdfast/worker"
)

// Verticals mounts every vertical's routes on the API as it is built,
// each given only the parts of the server and the settings it uses; the
// probe only with HOLDFAST_PROBE.
func Verticals(cfg config.Config) api.Mount {
	return func(s *api.Server) {
		v1, limits := s.V1(), s.Limits()
		stays.Mount(v1, stays.Deps{Pool: s.Pool, Redis: s.Redis, Writes: s, PublicLimit: limits.Public()})
		shop.Mount(v1, shop.Deps{Pool: s.Pool, Writes: s,
			CartGroupRead: cfg.CartGroupRead, DependencyTimeout: cfg.DependencyTimeout})
		events.Mount(v1, events.Deps{Pool: s.Pool, Redis: s.Redis, Log: s.Log, Registry: s.Registry,
			Writes: s, Limits: limits, IssueTicket: s.IssueTicket, Pages: s.Root(),
			Secret: cfg.JWTSecret, DuplicateWindow: cfg.DuplicateWindow})
		if cfg.EnableProbe {
			probe.Mount(v1, s)
		}
	}
}

// Modules are every vertical's writes and periodic tasks for the worker,
// each given the settings it uses; the probe only with HOLDFAST_PROBE.
func Modules(cfg config.Config) []worker.Types {
	mods := []worker.Types{
		stays.Worker(cfg.HoldTTL, cfg.HoldLockWait, cfg.HoldWritesTogether),
		shop.Worker(cfg.ReservationTTL),
		events.Worker(cfg.FCFSLockWait, cfg.EventsReconcile, cfg.JWTSecret),
	}
	if cfg.EnableProbe {
		mods = append(mods, probe.Types)
	}
	return mods
}
