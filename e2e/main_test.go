// Package e2e tests the request pipeline end to end: the real API over HTTP,
// real workers (in process and as separate processes), real Postgres and
// Redis, and the probe write type whose data exposes any broken guarantee.
package e2e

import (
	"os"
	"testing"

	"github.com/holdfast/holdfast/internal/systest"
)

func TestMain(m *testing.M) {
	systest.MaybeRunWorkerProcess()
	os.Exit(m.Run())
}
