package loadtest

import (
	"context"
	"os"
	"testing"

	"github.com/holdfast/holdfast/internal/systest"
)

// TestMain lets recovery's test run its victim worker as a process of its
// own: this test binary, re-executed.
func TestMain(m *testing.M) {
	systest.MaybeRunServeProcess()
	os.Exit(m.Run())
}

// runInBackground starts Run and returns what waits for its end, so a
// test can act on the system while the scenario runs.
func runInBackground(ctx context.Context, name string, opt Options) (wait func() (*Report, error)) {
	type result struct {
		rep *Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := Run(ctx, name, opt)
		done <- result{rep, err}
	}()
	return func() (*Report, error) {
		r := <-done
		return r.rep, r.err
	}
}
