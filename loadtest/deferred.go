package loadtest

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hibiken/asynq"
)

// Deferred is the Asynq work a run leaves for later. Every accepted write is
// one task (K1); a drain applies many requests per batch, and the tasks of
// requests that queued behind a key's backlog or found its key held are
// deferred (K4), to run as no-ops once their requests are applied: folded
// by the worker's aggregator, or scheduled a minute or more ahead
// (AGGREGATE_DEFERRED_TASKS=false). Most of that CPU falls after the
// measured phase, so Run fires the scheduled tasks at once, waits until the
// queues have nothing pending, active or aggregating, and reports what they
// cost.
type Deferred struct {
	Tasks   int     `json:"tasks"`
	Seconds float64 `json:"seconds"`
	// CPUSeconds is the CPU spent while they ran, by part, as
	// Report.CPUSeconds.
	CPUSeconds map[string]float64 `json:"cpuSeconds,omitempty"`
	// Error says why they could not be fired or waited for; the rest of
	// the report stands.
	Error string `json:"error,omitempty"`
}

// holdfastQueues are holdfast's Asynq queues, the verticals' (stays, shop, events):
// the only ones whose scheduled tasks the tool fires, so other users of the
// same Redis are left alone. TestQueuesAreTheVerticals keeps them in step.
var holdfastQueues = []string{"stays", "shop", "events"}

// inspect opens Asynq's Inspector on the Redis at redisURL.
func inspect(redisURL string) (*asynq.Inspector, error) {
	opt, err := asynq.ParseRedisURI(redisURL)
	if err != nil {
		return nil, err
	}
	return asynq.NewInspector(opt), nil
}

// existing returns those of queues that Asynq knows on insp's Redis: a
// queue no task has reached yet has no info to read.
func existing(insp *asynq.Inspector, queues []string) ([]string, error) {
	known, err := insp.Queues()
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(slices.Clone(queues), func(q string) bool { return !slices.Contains(known, q) }), nil
}

// runDeferred fires every scheduled task of queues on the Redis at redisURL
// and measures the CPU until none of them has pending or active tasks.
// Tasks that go to retry or are scheduled again meanwhile are not waited
// for.
func runDeferred(ctx context.Context, redisURL string, queues []string, metricsURLs map[string]string) (*Deferred, error) {
	insp, err := inspect(redisURL)
	if err != nil {
		return nil, fmt.Errorf("deferred tasks: %w", err)
	}
	defer insp.Close()
	if queues, err = existing(insp, queues); err != nil {
		return nil, fmt.Errorf("deferred tasks: %w", err)
	}
	cpu := startCPU(ctx, metricsURLs)
	start := time.Now()
	d := &Deferred{}
	for _, q := range queues {
		info, err := insp.GetQueueInfo(q)
		if err != nil {
			return nil, fmt.Errorf("deferred tasks of %s: %w", q, err)
		}
		n, err := insp.RunAllScheduledTasks(q)
		if err != nil {
			return nil, fmt.Errorf("deferred tasks of %s: %w", q, err)
		}
		d.Tasks += n + info.Aggregating
	}
	deadline := time.Now().Add(5 * time.Minute)
	// Idle twice in a row: between the aggregator taking a group's tasks
	// and enqueuing the task they fold into, none of them is counted.
	for idle := 0; idle < 2; {
		busy := false
		for _, q := range queues {
			info, err := insp.GetQueueInfo(q)
			if err != nil {
				return nil, fmt.Errorf("deferred tasks of %s: %w", q, err)
			}
			busy = busy || info.Pending+info.Active+info.Aggregating > 0
		}
		if idle++; busy {
			idle = 0
		}
		if idle < 2 {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("deferred tasks: queues not empty after 5 minutes")
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	d.Seconds = round(time.Since(start).Seconds(), 3)
	d.CPUSeconds = cpu.read(ctx)
	return d, nil
}
