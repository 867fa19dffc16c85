package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// The README's "Try it" section, run as a newcomer would run it: its shell
// blocks pasted, in order, into one shell at the checkout while `make run`
// runs. Each answer the README shows (a comment line starting "# {" or
// "# [" under the command) must match what the command printed, with "…"
// standing for anything; a command with no answer shown must print no error.
// Then the database must hold what the walk-through made: a confirmed stay,
// an order and two reserved seats.
//
// The one change made to the README's text is the API's address: make run
// here listens on a free port of the test's, not on localhost:8080.
func TestReadmeWalkThrough(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Fatal("the README's walk-through needs jq (Debian: apt-get install jq)")
	}
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	steps := readmeSteps(t, string(readme), "Try it")

	m := startMakeRun(t)
	for m.out.Scan() {
		if strings.HasPrefix(strings.TrimSpace(m.out.Text()), "Press Ctrl-C") {
			break
		}
	}

	// A checkout as the README assumes it: bin/ holds the binaries and the
	// dev secret make run made.
	checkout := t.TempDir()
	require.NoError(t, os.Symlink(m.bin, filepath.Join(checkout, "bin")))
	var script strings.Builder
	script.WriteString("set -eo pipefail\n")
	for i, s := range steps {
		fmt.Fprintf(&script, "printf '\\n@@step %d@@\\n'\n%s\n", i, strings.ReplaceAll(s.commands, "http://localhost:8080", "http://"+m.api))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "bash", "-c", script.String())
	sh.Dir = checkout
	sh.Env = without(m.env, "JWT_SECRET") // the README exports it
	out, err := sh.CombinedOutput()
	require.NoError(t, err, "the walk-through stopped:\n%s", out)

	outputs := strings.Split(string(out), "\n@@step ")
	require.Len(t, outputs, len(steps)+1, "%s", out)
	for i, s := range steps {
		got := strings.TrimSpace(strings.TrimPrefix(outputs[i+1], fmt.Sprintf("%d@@", i)))
		if len(s.answers) == 0 {
			require.NotContains(t, got, `"error":{`, "step %d:\n%s", i, s.commands)
			continue
		}
		lines := strings.Split(got, "\n")
		require.Len(t, lines, len(s.answers), "step %d printed:\n%s\nthe README shows:\n%s", i, got, strings.Join(s.answers, "\n"))
		for j, want := range s.answers {
			require.Regexp(t, answerPattern(want), lines[j], "step %d:\n%s", i, s.commands)
		}
	}

	conn, err := pgx.Connect(ctx, m.db)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var stays, orders, seats int
	require.NoError(t, conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM stay_reservations WHERE status = 'Confirmed'),
		(SELECT count(*) FROM orders),
		(SELECT count(*) FROM seat_reservations)`).Scan(&stays, &orders, &seats))
	require.Equal(t, [3]int{1, 1, 2}, [3]int{stays, orders, seats}, "confirmed stays, orders, reserved seats")
}

// A readmeStep is the commands since the previous answer shown, and the
// answer lines shown under them.
type readmeStep struct {
	commands string
	answers  []string
}

// readmeSteps reads the ```sh blocks of the README section with the given
// heading.
func readmeSteps(t *testing.T, readme, heading string) []readmeStep {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n## "+heading+"\n")
	require.True(t, ok, "the README has no section %q", heading)
	section, _, _ = strings.Cut(section, "\n## ")
	var steps []readmeStep
	var cur readmeStep
	inBlock := false
	for _, line := range strings.Split(section, "\n") {
		switch {
		case line == "```sh":
			inBlock = true
		case line == "```":
			inBlock = false
		case !inBlock:
		case strings.HasPrefix(line, "# {") || strings.HasPrefix(line, "# ["):
			cur.answers = append(cur.answers, strings.TrimPrefix(line, "# "))
		default:
			if len(cur.answers) > 0 {
				steps = append(steps, cur)
				cur = readmeStep{}
			}
			cur.commands += line + "\n"
		}
	}
	if cur.commands != "" {
		steps = append(steps, cur)
	}
	require.GreaterOrEqual(t, len(steps), 8, "the README's walk-through has too few answers to check")
	return steps
}

// answerPattern matches a whole line against an answer the README shows,
// "…" standing for any text.
func answerPattern(shown string) *regexp.Regexp {
	parts := strings.Split(shown, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
}

func without(env []string, name string) []string {
	var kept []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			kept = append(kept, kv)
		}
	}
	return kept
}
