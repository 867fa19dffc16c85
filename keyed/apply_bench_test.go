package keyed_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/probe"
	"github.com/holdfast/holdfast/requests"
)

// BenchmarkBatchApply times how fast a worker's engine applies a backlog:
// b.N probe writes accepted (durable and in their mailboxes) before the
// clock starts, then drained through Engine.Drain, the path a worker's task
// takes, with the worker's options (BATCH_MAX 256, 5 s drain slices, after
// which the key is handed to a new drain, as in production). It reports the
// requests applied per second and per apply transaction (the probe logs each
// application's transaction id).
//
// With one key a single drain applies everything. With 100 keys, 1 or 8
// concurrent drains take keys in turn, as a worker's task slots would; a
// worker's concurrency is bounded by its Postgres pool (8 here). In the
// shared-key cases every request names one of 24 keys of its own (a
// client's, accepted in turn) and one key all share. When the shared key
// sorts after the others, each request's drain is the one of its own key,
// which gathers the shared one (doc.go, "Groups"): waiting plain, the
// shared key goes from drain to drain, a few requests each time; waiting
// quietly, the drain that holds it takes the waiting drains over and
// applies in batches (waiting.go, QUIET_WAITING). When it sorts first, its
// drain gathers the others and applies in batches. The shared-last case
// runs both ways.
func BenchmarkBatchApply(b *testing.B) {
	rig := newBenchRig(b)
	ctx := context.Background()
	cases := []struct {
		name   string
		keys   int
		drains int
		// shared, when set, is the suffix of a counter every request also
		// names: "-shared" sorts after the counters of their own, "--shared"
		// before them.
		shared string
		// plainWaiting drains with quiet waiting off (keyed/waiting.go).
		plainWaiting bool
	}{
		{"keys=1", 1, 1, "", false},
		{"keys=100/drains=1", 100, 1, "", false},
		{"keys=100/drains=8", 100, benchPoolConns, "", false},
		{"keys=24+shared-last/drains=8", 24, benchPoolConns, "-shared", false},
		{"keys=24+shared-last/drains=8/plain-waiting", 24, benchPoolConns, "-shared", true},
		{"keys=24+shared-first/drains=8", 24, benchPoolConns, "--shared", false},
	}
	round := 0
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.StopTimer()
			// Fresh counters every round: the earlier rounds' are drained.
			round++
			prefix := "apply-" + strconv.Itoa(round)
			subs := probeSubmissions(prefix, c.keys)
			if c.shared != "" {
				for i := range subs {
					subs[i] = probeSubmission(prefix+"-"+strconv.Itoa(i), prefix+c.shared)
				}
			}
			acceptAll(b, rig.intake, subs, b.N)

			keys := make(chan string, len(subs))
			for _, s := range subs {
				keys <- s.Keys[0]
			}
			close(keys)
			worker := rig.worker
			if c.plainWaiting {
				worker = rig.plainWaiting
			}
			b.StartTimer()
			var wg sync.WaitGroup
			for range c.drains {
				wg.Go(func() {
					for k := range keys {
						// A drain returns when the mailbox is empty or its
						// slice is over, having handed the key on (to a
						// task no worker runs here). The mailbox is the
						// sorted set under the key's tag (keyed/scripts.go).
						for rig.rdb.ZCard(ctx, keyed.KeyTag(k)+":mbox").Val() > 0 {
							if err := worker.Drain(ctx, k, probe.Queue); err != nil {
								b.Errorf("drain %s: %v", k, err)
								return
							}
							// A drain whose group another took over (keyed/waiting.go)
							// returns while that one applies its requests; a worker's
							// slot would run another task, this one looks again soon.
							time.Sleep(time.Millisecond)
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()

			var succeeded, txs int
			require.NoError(b, rig.pool.QueryRow(ctx, `SELECT count(*) FROM requests
				WHERE status = 'succeeded' AND keys[1] LIKE $1`, probe.SerialKey(prefix)+"-%").Scan(&succeeded))
			require.NoError(b, rig.pool.QueryRow(ctx, `SELECT count(DISTINCT tx) FROM probe_log WHERE key LIKE $1`,
				prefix+"-%").Scan(&txs))
			require.Equal(b, b.N, succeeded, "every accepted request applied")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
			b.ReportMetric(float64(b.N)/float64(txs), "requests/tx")
			b.ReportMetric(float64(txs), "txs")
		})
	}
}

// acceptAll accepts n submissions, taking subs in turn, from a few goroutines.
func acceptAll(b *testing.B, intake *requests.Intake, subs []requests.Submission, n int) {
	b.Helper()
	ctx := context.Background()
	work := make(chan int, n)
	for i := range n {
		work <- i
	}
	close(work)
	var wg sync.WaitGroup
	for range benchPoolConns {
		wg.Go(func() {
			for i := range work {
				if _, _, err := intake.Accept(ctx, subs[i%len(subs)]); err != nil {
					b.Errorf("accept: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}
