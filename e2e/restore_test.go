package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/internal/testenv"
)

// The restore that docs/deploy.md documents, performed: a backup of
// Postgres (pg_dump -Fc) taken while some accepted requests were still
// open, more requests accepted after it, then the backup restored into a
// new database and holdfast started on it with an empty Redis (Redis is
// not backed up: its state would be newer than the restored record).
// After the restore every request the backup holds ends exactly once (the
// open ones re-driven from Postgres), the seat counts agree with the
// seats and the outcomes, a request accepted after the backup is unknown
// (404: what restoring to an earlier point loses), and the event sells
// its remaining seats to new fans, then is sold out.
func TestABackupRestoredIntoANewDatabaseServes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const seats = 30
	a := systest.Start(t, systest.Options{})
	e := newEvent(t, a, map[string]any{"name": "Restored", "seatCount": seats})
	phones := 0
	grab := func(s *systest.System, fan string) string {
		phones++
		return submitFCFS(t, s.Client(fan, domain.RoleUser), e.EventID,
			map[string]string{"phone": fmt.Sprintf("+8210%08d", phones)})
	}
	fans := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s%d", prefix, i)
		}
		return out
	}

	// Before the backup: 10 applied, 8 accepted and still open (no worker).
	w := a.StartWorker("before")
	applied := map[string]string{}
	for _, f := range fans("applied", 10) {
		applied[f] = grab(a, f)
	}
	a.WaitAllTerminal(time.Minute)
	w.Stop()
	open := map[string]string{}
	for _, f := range fans("open", 8) {
		open[f] = grab(a, f)
	}
	require.Equal(t, 8, a.Statuses()[domain.StatusQueued], "the backup holds open requests")

	var schema string
	require.NoError(t, a.Pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema))
	dump := filepath.Join(t.TempDir(), "holdfast.dump")
	server := testenv.PGServerURL()
	pgTool(t, "pg_dump", "--format=custom", "--schema="+schema, "--file="+dump, server+"/holdfast_test")

	// After the backup: accepted, and lost by restoring to it.
	lost := map[string]string{}
	for _, f := range fans("lost", 4) {
		lost[f] = grab(a, f)
	}

	// Restore into a new database, as after losing the old one.
	db := "holdfast_restore_" + strings.ToLower(strings.TrimPrefix(schema, "t_"))
	admin := testenv.Pool(t, server+"/postgres?sslmode=disable")
	_, err := admin.Exec(ctx, "CREATE DATABASE "+db)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)") })
	pgTool(t, "psql", "--quiet", "--command=CREATE EXTENSION btree_gist SCHEMA public", server+"/"+db)
	pgTool(t, "pg_restore", "--exit-on-error", "--dbname="+server+"/"+db, dump)

	b := systest.Start(t, systest.Options{Workers: 1,
		DatabaseURL: server + "/" + db + "?sslmode=disable&search_path=" + schema + "%2Cpublic"})
	view := func(fan, id string) (int, string) {
		r := b.Client(fan, domain.RoleUser).Do("GET", "/api/v1/requests/"+id, nil)
		return r.Status, string(r.Body)
	}
	for fan, id := range applied {
		status, body := view(fan, id)
		require.Equal(t, http.StatusOK, status, body)
		require.Contains(t, body, `"status":"succeeded"`, "applied before the backup: kept")
	}
	for fan, id := range open {
		seatOf(t, b.Client(fan, domain.RoleUser).Wait(id, time.Minute)) // open in the backup: re-driven, applied
	}
	for fan, id := range lost {
		// Accepted after the backup: gone with the restore, so reading it
		// settles it as never stored (docs/api.md), and its client sends
		// the write again.
		status, body := view(fan, id)
		require.Equal(t, http.StatusOK, status, body)
		require.Contains(t, body, `"code":"NOT_STORED"`, "accepted after the backup: %s", body)
	}
	b.WaitAllTerminal(time.Minute)
	require.Equal(t, map[domain.Status]int{domain.StatusSucceeded: 18, domain.StatusFailed: len(lost)}, b.Statuses(),
		"each request of the backup ended once; each lost one reads as not stored")

	// The event sells on from where the backup left it, and no further.
	sold := 18
	for _, f := range fans("after", seats-sold+3) {
		v := b.Client(f, domain.RoleUser).Wait(grab(b, f), time.Minute)
		if sold < seats {
			seatOf(t, v)
			sold++
			continue
		}
		require.Equal(t, domain.StatusRejected, v.Status)
		require.Equal(t, domain.CodeSoldOut, v.Error.Code)
	}
	var taken, reserved, succeeded int
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT seats_taken,
		(SELECT count(*) FROM seats WHERE event_id = $1 AND reserved),
		(SELECT count(*) FROM requests WHERE status = 'succeeded')
		FROM events WHERE id = $1`, e.EventID).Scan(&taken, &reserved, &succeeded))
	require.Equal(t, []int{seats, seats, seats}, []int{taken, reserved, succeeded})
	var pub events.Public
	anon := b.Client("x", domain.RoleUser)
	anon.Token = ""
	r := anon.Do("GET", fmt.Sprintf("/api/v1/public/events/%d", e.EventID), nil)
	require.Equal(t, http.StatusOK, r.Status)
	r.JSON(t, &pub)
	require.Zero(t, pub.RemainingSeats)
}

// pgTool runs a Postgres client tool and fails the test with its output.
func pgTool(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	require.NoError(t, err, "%s: %s", name, out)
}
