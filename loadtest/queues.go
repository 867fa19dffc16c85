package loadtest

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hibiken/asynq"
)

// holdfastQueues are holdfast's Asynq queues, the verticals' (stays, shop,
// events): the only ones the tool pauses or whose scheduled tasks it fires,
// so other users of the same Redis are left alone.
// TestQueuesAreTheVerticals keeps them in step.
var holdfastQueues = []string{"stays", "shop", "events"}

// queueWatch follows queues on one Redis: it counts the tasks they
// process, pauses them and resumes what it paused.
type queueWatch struct {
	insp   *asynq.Inspector
	queues []string
	paused []string
	start  int
}

// watchQueues opens the queues on redisURL and notes how many tasks they
// have processed so far.
func watchQueues(redisURL string, queues []string) (*queueWatch, error) {
	opt, err := asynq.ParseRedisURI(redisURL)
	if err != nil {
		return nil, fmt.Errorf("queues: %w", err)
	}
	w := &queueWatch{insp: asynq.NewInspector(opt), queues: queues}
	if w.start, err = w.count(processed); err != nil {
		_ = w.insp.Close()
		return nil, err
	}
	return w, nil
}

// count sums f over the queues that exist: a queue no task has reached yet
// has no info to read.
func (w *queueWatch) count(f func(*asynq.QueueInfo) (int, error)) (int, error) {
	known, err := w.insp.Queues()
	if err != nil {
		return 0, fmt.Errorf("queues: %w", err)
	}
	n := 0
	for _, q := range w.queues {
		if !slices.Contains(known, q) {
			continue
		}
		info, err := w.insp.GetQueueInfo(q)
		if err == nil {
			var k int
			k, err = f(info)
			n += k
		}
		if err != nil {
			return 0, fmt.Errorf("queue %s: %w", q, err)
		}
	}
	return n, nil
}

func processed(q *asynq.QueueInfo) (int, error) { return q.ProcessedTotal, nil }

// since is how many tasks the queues processed since watchQueues.
func (w *queueWatch) since() (int, error) {
	n, err := w.count(processed)
	return n - w.start, err
}

// pause pauses every queue; a queue paused already (by an operator, or a
// run that died) is an error, as the run would then measure something
// else and resume what it did not pause.
func (w *queueWatch) pause() error {
	for _, q := range w.queues {
		if err := w.insp.PauseQueue(q); err != nil {
			return fmt.Errorf("pause queue %s: %w", q, err)
		}
		w.paused = append(w.paused, q)
	}
	return nil
}

// resume unpauses the queues pause paused; it is safe to call twice.
func (w *queueWatch) resume() error {
	var first error
	for _, q := range w.paused {
		if err := w.insp.UnpauseQueue(q); err != nil && first == nil {
			first = fmt.Errorf("resume queue %s: %w", q, err)
		}
	}
	w.paused = nil
	return first
}

func (w *queueWatch) close() error {
	err := w.resume()
	if cerr := w.insp.Close(); err == nil {
		err = cerr
	}
	return err
}

// Applying, in an intake run, is the workers' side of the run while its
// clients submit. On this machine both share the cores with the API, so
// the intake rate measured is the API's minus what the workers take
// meanwhile. HoldApply measures the API's side alone: it pauses holdfast's
// queues (as an operator would in Asynqmon) until every client has
// submitted, so the workers only wait; then it resumes them and the run
// follows every request to its outcome as usual. In a deployment the
// workers run on machines of their own.
type Applying struct {
	// Held is whether the queues were paused while the clients submitted.
	Held bool `json:"held"`
	// TasksWhileSubmitting is how many tasks of holdfast's queues the
	// workers processed from the first submit to the last 202; with Held,
	// zero unless the pause failed to hold.
	TasksWhileSubmitting int `json:"tasksWhileSubmitting"`
}

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

// runDeferred fires every scheduled task of queues on the Redis at redisURL
// and measures the CPU until none of them has pending, active or
// aggregating tasks. Tasks that go to retry or are scheduled again
// meanwhile are not waited for.
func runDeferred(ctx context.Context, redisURL string, queues []string, metricsURLs map[string]string) (*Deferred, error) {
	w, err := watchQueues(redisURL, queues)
	if err != nil {
		return nil, fmt.Errorf("deferred tasks: %w", err)
	}
	defer func() { _ = w.close() }()
	cpu := startCPU(ctx, metricsURLs)
	start := time.Now()
	d := &Deferred{}
	if d.Tasks, err = w.count(func(q *asynq.QueueInfo) (int, error) {
		n, err := w.insp.RunAllScheduledTasks(q.Queue)
		return n + q.Aggregating, err
	}); err != nil {
		return nil, fmt.Errorf("deferred tasks: %w", err)
	}
	// Idle twice in a row: between the aggregator taking a group's tasks
	// and enqueuing the task they fold into, none of them is counted.
	for idle, deadline := 0, time.Now().Add(5*time.Minute); ; {
		busy, err := w.count(func(q *asynq.QueueInfo) (int, error) { return q.Pending + q.Active + q.Aggregating, nil })
		if err != nil {
			return nil, fmt.Errorf("deferred tasks: %w", err)
		}
		if idle++; busy > 0 {
			idle = 0
		}
		if idle == 2 {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("deferred tasks: queues not empty after 5 minutes")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	d.Seconds = round(time.Since(start).Seconds(), 3)
	d.CPUSeconds = cpu.read(ctx)
	return d, nil
}
