package testenv

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// SkewedPostgresServer is a PostgresServer whose clock runs offset from the
// machine's (ahead; behind, when negative), as a server on another machine
// whose clock disagrees with this one's: libfaketime, preloaded into the
// server's processes, moves every time they read. Postgres reads the time
// through the C library, which libfaketime wraps. A Go program reads it from
// the kernel's vDSO, which libfaketime cannot move (tried: a Go binary under
// faketime prints the true time), and redis-server's jemalloc cannot start
// under libfaketime (it hangs in its first clock_gettime), so in a test of
// clock skew the process whose clock is off is Postgres, and holdfast's API,
// workers and Redis run on the machine's clock: a skew is a skew whichever
// side it is on. It fails when libfaketime is missing (.ci/run installs it).
func SkewedPostgresServer(t testing.TB, offset time.Duration, settings ...string) *PGServer {
	t.Helper()
	return postgresServer(t, faketime(t, offset), settings...)
}

// faketime is the environment that moves a program's clock by offset (and
// leaves its monotonic clock alone: timeouts and sleeps keep their length).
func faketime(t testing.TB, offset time.Duration) []string {
	lib, _ := filepath.Glob("/usr/lib/*/faketime/libfaketime.so.1")
	require.NotEmpty(t, lib, "no libfaketime: apt-get install libfaketime")
	return []string{"LD_PRELOAD=" + lib[0], fmt.Sprintf("FAKETIME=%+d", int64(offset/time.Second)), "DONT_FAKE_MONOTONIC=1"}
}
