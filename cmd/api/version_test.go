package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Both binaries, built as make build builds them, print their build with
// --version, without any configuration: the module version, the commit
// they were built from (when built in a git checkout) and the Go version.
func TestBinariesPrintTheirVersion(t *testing.T) {
	t.Parallel()
	head, gitErr := exec.Command("git", "rev-parse", "HEAD").Output()
	dir := t.TempDir()
	for _, c := range []string{"api", "worker"} {
		bin := filepath.Join(dir, c)
		// As make build does, with -race: the packages are compiled so
		// already for the tests, so this only links.
		out, err := exec.Command("go", "build", "-race", "-buildvcs=auto", "-o", bin, "../"+c).CombinedOutput()
		require.NoError(t, err, "%s", out)
		cmd := exec.Command(bin, "--version")
		cmd.Env = []string{"PATH=/usr/bin:/bin"} // no JWT_SECRET, no DATABASE_URL: none needed
		out, err = cmd.Output()
		require.NoError(t, err)
		line := strings.TrimSpace(string(out))
		fields := strings.Fields(line)
		require.GreaterOrEqual(t, len(fields), 3, "%q", line)
		require.Equal(t, "holdfast", fields[0])
		require.NotEmpty(t, fields[1], "the module version")
		require.Equal(t, runtime.Version(), fields[len(fields)-1])
		if gitErr == nil {
			require.Equal(t, strings.TrimSpace(string(head)), fields[2], "the revision built")
		}
	}
}
