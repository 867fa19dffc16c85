package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/probe"
)

// TestIntakeGroupCommit: concurrent writes are made durable together, many
// in one transaction (Postgres's xmin tells rows of one transaction apart),
// each with its own acceptance seq, every one stored with its own payload;
// writes with an Idempotency-Key among them as much as the others, and each
// such key replays its request afterwards. The control is the same writes sent one at a time: a transaction each.
// With GROUP_COMMIT=false, the concurrent writes take a transaction each
// too: the switch turns the mechanism off.
func TestIntakeGroupCommit(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("GROUP_COMMIT=%t", on), func(t *testing.T) { t.Parallel(); testIntakeGroupCommit(t, on) })
	}
}

func testIntakeGroupCommit(t *testing.T, on bool) {
	s := systest.Start(t, systest.Options{Overrides: []string{"GROUP_COMMIT", fmt.Sprint(on)}})
	c := s.Client("grouper", domain.RoleUser)
	txns := func() (rows, txs int) {
		require.NoError(t, s.Pool.QueryRow(context.Background(),
			`SELECT count(*), count(DISTINCT xmin::text) FROM requests`).Scan(&rows, &txs))
		return rows, txs
	}

	for i := range 20 {
		c.Probe(probe.Payload{Keys: []string{fmt.Sprintf("serial-%d", i)}})
	}
	rows, txs := txns()
	require.Equal(t, 20, rows)
	require.Equal(t, 20, txs, "one at a time, each write is its own transaction")

	const n = 400
	ids := make([]string, n)
	var wg sync.WaitGroup
	for g := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 50 {
				ids[i] = c.Probe(probe.Payload{Keys: []string{fmt.Sprintf("k-%d", i)}}, idemKey(i)...)
			}
		}()
	}
	wg.Wait()
	rows, txs = txns()
	require.Equal(t, 20+n, rows)
	if on {
		require.Less(t, txs-20, n/2, "concurrent writes share transactions")
	} else {
		require.Equal(t, n, txs-20, "with the group commit off, each write is its own transaction")
	}
	t.Logf("%d concurrent writes in %d transactions", n, txs-20)

	var distinctSeq, matching int
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT count(DISTINCT seq),
		count(*) FILTER (WHERE keys[1] = $2 || (payload->'keys'->>0) AND status = 'queued') FROM requests WHERE id = ANY($1::uuid[])`,
		ids, probe.SerialKey("")).Scan(&distinctSeq, &matching))
	require.Equal(t, n, distinctSeq)
	require.Equal(t, n, matching, "each request keeps its own keys and payload")

	var shared int // transactions holding writes with keys and writes without
	require.NoError(t, s.Pool.QueryRow(context.Background(), `SELECT count(*) FROM (
		SELECT xmin::text FROM requests WHERE id = ANY($1::uuid[]) GROUP BY 1
		HAVING bool_or(idem_key IS NULL) AND bool_or(idem_key IS NOT NULL)) t`, ids).Scan(&shared))
	if on {
		require.Positive(t, shared, "writes with an Idempotency-Key share transactions with the others")
	}
	for i := 1; i < n; i += 2 * 50 {
		require.Equal(t, ids[i], c.Probe(probe.Payload{Keys: []string{fmt.Sprintf("k-%d", i)}}, idemKey(i)...), "replayed")
	}
	rows, _ = txns()
	require.Equal(t, 20+n, rows, "no replay stored a request")
}

// idemKey is the Idempotency-Key header of the i-th concurrent write: odd
// ones carry one.
func idemKey(i int) []string {
	if i%2 == 0 {
		return nil
	}
	return []string{"Idempotency-Key", fmt.Sprintf("grouper-%d", i)}
}
