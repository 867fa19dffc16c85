package testenv

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// SkewedPostgresServer is a PostgresServer whose clock runs offset ahead of
// the machine's (behind, when negative), as a server on another machine
// whose clock is off would: libfaketime, preloaded into the server's
// processes, moves every time they read. Postgres reads the time through the
// C library, which libfaketime wraps; a Go program reads it from the
// kernel's vDSO, which libfaketime cannot move (tried: a Go binary under
// faketime prints the true time), so in a test of clock skew the process
// whose clock is off is Postgres, and holdfast's API and workers run on the
// machine's. It fails when libfaketime is missing (.ci/run installs it).
func SkewedPostgresServer(t testing.TB, offset time.Duration, settings ...string) *PGServer {
	t.Helper()
	lib, _ := filepath.Glob("/usr/lib/*/faketime/libfaketime.so.1")
	require.NotEmpty(t, lib, "no libfaketime: apt-get install libfaketime")
	return postgresServer(t, []string{"LD_PRELOAD=" + lib[0], fmt.Sprintf("FAKETIME=%+d", int64(offset/time.Second)),
		"DONT_FAKE_MONOTONIC=1"}, settings...)
}
