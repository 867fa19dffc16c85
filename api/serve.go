package api

// The serving parts the composition root (cmd/wiring) starts: the
// private listeners, and the public one.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/hibiken/asynqmon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ServePrivate serves what is kept off the public address until ctx ends:
// /metrics on METRICS_ADDR, Asynqmon (mon, unless nil) on MONITORING_ADDR
// when that is set (else New serves mon as Deps.Monitoring).
func (s *Server) ServePrivate(ctx context.Context, mon *asynqmon.HTTPHandler) error {
	if s.cfg.MetricsAddr != "" {
		if err := serveMetrics(ctx, s.cfg.MetricsAddr, s.Registry, s.Log); err != nil {
			return err
		}
	}
	if mon != nil && s.cfg.MonitoringAddr != "" {
		return s.serveMonitoring(ctx, s.cfg.MonitoringAddr, mon, s.Log)
	}
	return nil
}

// ListenAndServe serves on ln, or on addr (HTTP_ADDR) when ln is nil,
// until ctx ends, then shuts down gracefully (Serve).
func (s *Server) ListenAndServe(ctx context.Context, addr string, ln net.Listener) error {
	log := s.Log
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("api: listen: %w", err)
		}
	}
	log.Info("api listening", "addr", ln.Addr().String())
	err := s.Serve(ctx, ln)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	log.Info("api stopped")
	return err
}

// serveMetrics serves the API's /metrics on addr (METRICS_ADDR) until ctx
// ends, for deployments that keep them off the public address.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("api: listen for metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server", "err", err)
		}
	}()
	log.Info("api metrics listening", "addr", ln.Addr().String())
	return nil
}

// serveMonitoring serves Asynqmon at /monitoring on addr (MONITORING_ADDR)
// until ctx ends, to admins only as on the public address.
func (s *Server) serveMonitoring(ctx context.Context, addr string, mon *asynqmon.HTTPHandler, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("api: listen for monitoring: %w", err)
	}
	app := fiber.New(fiber.Config{
		AppName: "holdfast monitoring", ErrorHandler: s.errorHandler, DisableStartupMessage: true,
		ReadTimeout: 60 * time.Second, WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second,
	})
	app.Use("/monitoring", s.adminOnly, adaptor.HTTPHandler(mon))
	app.Use(func(*fiber.Ctx) error { return fiber.ErrNotFound })
	go func() {
		<-ctx.Done()
		_ = app.Shutdown()
	}()
	go func() {
		if err := app.Listener(ln); err != nil {
			log.Warn("monitoring server", "err", err)
		}
	}()
	log.Info("api monitoring listening", "addr", ln.Addr().String())
	return nil
}
