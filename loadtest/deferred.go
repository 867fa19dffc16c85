package loadtest

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

// Deferred is the Asynq work a run leaves for later. Every accepted write is
// one task (K1); a drain applies many requests per batch, and the tasks of
// requests that queued behind a key's backlog are scheduled a minute or more
// ahead (K4), to fire as no-ops once their requests are applied. That CPU
// falls after the measured phase, so Run fires those tasks at once, waits
// until the queues are empty and reports what they cost.
type Deferred struct {
	Tasks   int     `json:"tasks"`
	Seconds float64 `json:"seconds"`
	// CPUSeconds is the CPU spent while they ran, by part, as
	// Report.CPUSeconds.
	CPUSeconds map[string]float64 `json:"cpuSeconds,omitempty"`
}

// runDeferred fires every scheduled task of every queue on the Redis at
// redisURL and measures the CPU until no queue has pending or active tasks.
func runDeferred(ctx context.Context, redisURL string, metricsURLs map[string]string) (*Deferred, error) {
	opt, err := asynq.ParseRedisURI(redisURL)
	if err != nil {
		return nil, fmt.Errorf("deferred tasks: %w", err)
	}
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	queues, err := insp.Queues()
	if err != nil {
		return nil, fmt.Errorf("deferred tasks: %w", err)
	}
	cpu := startCPU(ctx, metricsURLs)
	start := time.Now()
	d := &Deferred{}
	for _, q := range queues {
		n, err := insp.RunAllScheduledTasks(q)
		if err != nil {
			return nil, fmt.Errorf("deferred tasks of %s: %w", q, err)
		}
		d.Tasks += n
	}
	deadline := time.Now().Add(5 * time.Minute)
	for busy := true; busy; {
		busy = false
		for _, q := range queues {
			info, err := insp.GetQueueInfo(q)
			if err != nil {
				return nil, fmt.Errorf("deferred tasks of %s: %w", q, err)
			}
			busy = busy || info.Pending+info.Active > 0
		}
		if busy {
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
	d.CPUSeconds = cpu.stop(ctx)
	return d, nil
}
