package loadtest

import (
	"fmt"

	"github.com/hibiken/asynq"
)

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

// queueWatch follows holdfast's queues on one Redis for an intake run.
type queueWatch struct {
	insp   *asynq.Inspector
	queues []string
	paused []string
	start  int
}

// watchQueues opens the queues on redisURL and notes how many tasks they
// have processed so far.
func watchQueues(redisURL string, queues []string) (*queueWatch, error) {
	insp, err := inspect(redisURL)
	if err != nil {
		return nil, fmt.Errorf("queues: %w", err)
	}
	w := &queueWatch{insp: insp, queues: queues}
	if w.start, err = w.processed(); err != nil {
		_ = w.insp.Close()
		return nil, err
	}
	return w, nil
}

// processed sums the tasks ever processed by the queues that exist.
func (w *queueWatch) processed() (int, error) {
	queues, err := existing(w.insp, w.queues)
	if err != nil {
		return 0, fmt.Errorf("queues: %w", err)
	}
	n := 0
	for _, q := range queues {
		info, err := w.insp.GetQueueInfo(q)
		if err != nil {
			return 0, fmt.Errorf("queue %s: %w", q, err)
		}
		n += info.ProcessedTotal
	}
	return n, nil
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

// since is how many tasks the queues processed since watchQueues.
func (w *queueWatch) since() (int, error) {
	n, err := w.processed()
	return n - w.start, err
}

func (w *queueWatch) close() error {
	err := w.resume()
	if cerr := w.insp.Close(); err == nil {
		err = cerr
	}
	return err
}
