package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
)

// chaosOutage is how long each chaos fault lasts.
const chaosOutage = 5 * time.Second

// chaosScenarios are make chaos's faults: kill -9 and SIGSTOP of each store
// and each kind of process, for chaosOutage.
var chaosScenarios = []struct {
	name  string
	fault func(r *rig)
}{
	{"postgres-kill", func(r *rig) { r.killPostgres(chaosOutage) }},
	{"postgres-freeze", func(r *rig) { r.freezePostgres(chaosOutage) }},
	{"redis-kill", func(r *rig) { r.restartRedis(chaosOutage) }},
	{"redis-freeze", func(r *rig) { r.freezeRedis(chaosOutage) }},
	{"api-kill", func(r *rig) { outage(chaosOutage, func() { kill9(r.t, r.apis[0]) }, func() { r.replaceAPI(0) }) }},
	{"api-freeze", func(r *rig) { r.freezeProcess(r.apis[0].Cmd.Process.Pid, chaosOutage) }},
	{"worker-kill", func(r *rig) {
		outage(chaosOutage, func() { r.killWorker(0) }, func() { r.workers[0] = r.startWorker() })
	}},
	{"worker-freeze", func(r *rig) { r.freezeProcess(r.workers[0].Cmd.Process.Pid, chaosOutage) }},
}

// make chaos (HOLDFAST_CHAOS=1; make test skips it): for each fault, 600
// fans grab FCFS seats through two APIs behind a balancer and three
// workers, on private Postgres and Redis servers, without Idempotency-Key;
// the fault strikes 150 writes in. One line a scenario: the answers by
// status, the slowest, what the fans were told last, and the invariants,
// which it asserts: every fan told it succeeded owns a seat; every seat's
// owner was told it succeeded, or got no answer at all (its API killed
// mid-request); no seat twice; every accepted write terminal afterwards.
func TestChaos(t *testing.T) {
	if os.Getenv("HOLDFAST_CHAOS") == "" {
		t.Skip("make chaos runs the chaos scenarios (HOLDFAST_CHAOS=1)")
	}
	for _, sc := range chaosScenarios {
		t.Run(sc.name, func(t *testing.T) {
			r := newRig(t, rigSpec{apis: 2, workers: 3})
			seen := rushThrough(t, r, func() { sc.fault(r) })
			require.Eventually(t, func() bool { return r.open() == 0 }, 2*time.Minute, 100*time.Millisecond,
				"every accepted write terminal")
			byStatus, told := map[string]int{}, map[string]int{}
			var slowest timedAnswer
			for _, a := range seen.answers {
				byStatus[a.what]++
				if a.took > slowest.took {
					slowest = a
				}
			}
			for _, v := range seen.told {
				told[v]++
			}
			owners := chaosOwners(t, r, seen.eventID)
			for user, what := range seen.told {
				if what == "succeeded" {
					require.Contains(t, owners, user, "%s was told it succeeded", user)
				}
			}
			for user := range owners {
				require.Contains(t, []string{"succeeded", "no answer"}, seen.told[user], "%s owns a seat", user)
			}
			t.Logf("chaos: %-15s answers %s; slowest %.1f s (%s); told %s; invariants ok",
				sc.name, counts(byStatus), slowest.took.Seconds(), slowest.what, counts(told))
		})
	}
}

// chaosOwners is who owns a seat of event, each once; it fails the test if
// a seat or a user has two.
func chaosOwners(t *testing.T, r *rig, event int64) map[string]bool {
	var n, seats, users int
	require.NoError(t, r.s.Pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT seat_id),
		count(DISTINCT user_id) FROM seat_reservations WHERE event_id = $1`, event).Scan(&n, &seats, &users))
	require.Equal(t, n, seats, "no seat twice")
	require.Equal(t, n, users, "no user twice")
	rows, err := r.s.Pool.Query(context.Background(), `SELECT user_id FROM seat_reservations WHERE event_id = $1`, event)
	require.NoError(t, err)
	owners := map[string]bool{}
	for rows.Next() {
		var u string
		require.NoError(t, rows.Scan(&u))
		owners[u] = true
	}
	require.NoError(t, rows.Err())
	return owners
}

// counts writes m as "key×n" pairs in key order.
func counts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s×%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// killPostgres kills the private server's postmaster and every process it
// forked with SIGKILL, as a crash of its machine does, and starts it again
// (crash recovery) after d.
func (r *rig) killPostgres(d time.Duration) {
	outage(d, func() {
		for _, pid := range r.pg.Freeze().Pids { // stopped first: none forks more meanwhile
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}, r.pg.Start)
}

// freezeProcess stops process pid (an API or a worker) with SIGSTOP for d.
func (r *rig) freezeProcess(pid int, d time.Duration) {
	var f *testenv.Frozen
	outage(d, func() { f = testenv.FreezeTree(r.t, pid) }, func() { f.Thaw() })
}

// replaceAPI starts a replacement for API i, which was killed, and takes
// the dead one out of the balancer.
func (r *rig) replaceAPI(i int) {
	r.lb.Remove(r.apis[i].URL)
	r.apis[i] = r.startAPI()
}
