package systest

import (
	"context"
	"fmt"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/probe"
)

// ProbeReport is what the probe's tables say about one counter.
type ProbeReport struct {
	Key            string
	Counter        int64 // the counter's final value
	Succeeded      int   // succeeded requests that include the key
	LogRows        int   // applications logged
	DistinctReqs   int   // distinct requests among them
	DistinctValues int   // distinct values handed out
	Overlaps       int   // applications that started before another transaction's had ended
	Txs            int   // transactions that applied them
	MaxPerTx       int   // most applications in one transaction
}

// Probe reports on counter key.
func (s *System) Probe(key string) ProbeReport {
	s.t.Helper()
	ctx := context.Background()
	r := ProbeReport{Key: key}
	err := s.Pool.QueryRow(ctx, `SELECT coalesce((SELECT value FROM probe_counters WHERE key = $1), 0)`, key).Scan(&r.Counter)
	require.NoError(s.t, err)
	err = s.Pool.QueryRow(ctx, `SELECT count(*) FROM requests WHERE type = $1 AND status = 'succeeded' AND keys @> ARRAY[$2]`,
		probe.TypeIncr, probe.SerialKey(key)).Scan(&r.Succeeded)
	require.NoError(s.t, err)
	err = s.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT request_id), count(DISTINCT value), count(DISTINCT tx),
			coalesce(max(n), 0)
		FROM probe_log LEFT JOIN (SELECT tx AS t, count(*) AS n FROM probe_log WHERE key = $1 GROUP BY tx) c ON c.t = tx
		WHERE key = $1`, key).Scan(&r.LogRows, &r.DistinctReqs, &r.DistinctValues, &r.Txs, &r.MaxPerTx)
	require.NoError(s.t, err)
	rows, err := s.Pool.Query(ctx, `SELECT tx, started_at, ended_at FROM probe_log WHERE key = $1 ORDER BY started_at`, key)
	require.NoError(s.t, err)
	defer rows.Close()
	var lastEnd time.Time
	var lastTx int64 = -1
	for rows.Next() {
		var tx int64
		var st, en time.Time
		require.NoError(s.t, rows.Scan(&tx, &st, &en))
		if tx != lastTx && st.Before(lastEnd) {
			r.Overlaps++
		}
		if en.After(lastEnd) {
			lastEnd = en
		}
		lastTx = tx
	}
	require.NoError(s.t, rows.Err())
	return r
}

// Violations lists the invariants the report breaks: lost updates, double
// application, duplicate values or overlapping applications.
func (r ProbeReport) Violations() []string {
	var v []string
	if r.Counter != int64(r.Succeeded) {
		v = append(v, fmt.Sprintf("counter %d != %d successes (lost update)", r.Counter, r.Succeeded))
	}
	if r.LogRows != r.DistinctReqs {
		v = append(v, fmt.Sprintf("%d applications of %d requests (applied twice)", r.LogRows, r.DistinctReqs))
	}
	if r.DistinctValues != r.LogRows {
		v = append(v, fmt.Sprintf("%d distinct values for %d applications", r.DistinctValues, r.LogRows))
	}
	if r.Overlaps > 0 {
		v = append(v, fmt.Sprintf("%d overlapping applications", r.Overlaps))
	}
	return v
}
