// Package e2e tests the request pipeline end to end: the real API over HTTP,
// real workers (in process and as separate processes), real Postgres and
// Redis, and the probe write type whose data exposes any broken guarantee.
package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/systest"
)

func TestMain(m *testing.M) {
	systest.MaybeRunServeProcess()
	os.Exit(m.Run())
}

// loadDeadline bounds one load-tool run in a test: a run that stops making
// progress fails its test with the context's error, well inside the
// package's 20-minute timeout (make test), instead of hanging until it.
const loadDeadline = 4 * time.Minute

// loadContext is a context that ends loadDeadline from now, or with the test.
func loadContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), loadDeadline)
	t.Cleanup(cancel)
	return ctx
}
