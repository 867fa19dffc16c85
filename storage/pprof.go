package storage

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"time"
)

// ServePprof serves Go's profiler on addr until ctx ends, when addr is set
// (PPROF_ADDR). It is off by default: profiles expose internals.
func ServePprof(ctx context.Context, addr string, log *slog.Logger) {
	if addr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
			log.Warn("pprof server", "err", err)
		}
	}()
}
