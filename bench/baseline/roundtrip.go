package baseline

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/worker"
)

// The plain round trip is two processes, as holdfast is: the roundtrip
// mode stores each write and enqueues its task (as Durable does) and
// answers long polls; the roundtrip-tasks mode runs an Asynq server whose
// handler does nothing but announce the request done, with one PUBLISH on
// a Redis channel that every roundtrip process follows. The announcement
// is all the outcome there is: no authentication, rate limit, per-key
// order, business logic or durable outcome, and each task is processed as
// it comes, where holdfast applies a hot key's writes in batches and lets
// their tasks run later (K4). Nothing here recovers a write: a lost
// announcement (the subscription dropped), or a task whose enqueue failed
// after its request was stored (holdfast's reconciler would dispatch it
// again), leaves the request queued for every poll. On one machine's
// loopback neither happens, and a bench run would show it as a write that
// never ended.

// maxWait caps the roundtrip mode's long poll, as holdfast's is capped.
const maxWait = 30 * time.Second

// doneChannel is where the roundtrip-tasks processes of a queue announce
// requests done.
func (s *Server) doneChannel() string { return "baseline:" + s.opt.Queue + ":done" }

// newTaskServer is the roundtrip-tasks mode's Asynq server, configured as
// the Asynq floor's (bench/floor) and holdfast's worker's.
func (s *Server) newTaskServer() *asynq.Server {
	return asynq.NewServerFromRedisClient(s.rdb, asynq.Config{
		Concurrency:       s.opt.Concurrency,
		Queues:            map[string]int{s.opt.Queue: 1},
		TaskCheckInterval: 20 * time.Millisecond,
		ShutdownTimeout:   5 * time.Second,
		Logger:            worker.AsynqLogger(s.opt.Log),
		LogLevel:          asynq.WarnLevel,
	})
}

// startTasks starts the Asynq server; each task's id is its request's. An
// announcement no roundtrip process heard (none subscribed, or one
// resubscribing) fails the task, so Asynq runs it again later.
func (s *Server) startTasks() error {
	mux := asynq.NewServeMux()
	mux.HandleFunc(TaskType, func(ctx context.Context, t *asynq.Task) error {
		heard, err := s.rdb.Publish(ctx, s.doneChannel(), t.ResultWriter().TaskID()).Result()
		if err == nil && heard == 0 {
			err = fmt.Errorf("baseline: no one follows %s", s.doneChannel())
		}
		return err
	})
	if err := s.tasks.Start(mux); err != nil {
		return fmt.Errorf("baseline: start task server: %w", err)
	}
	return nil
}

// followDone subscribes to the announcements and marks each request done
// until the returned stop is called, which returns once nothing more is
// marked. It returns once subscribed, so no announcement made after it
// returns is missed.
func (s *Server) followDone(ctx context.Context) (stop func(), err error) {
	sub := s.rdb.Subscribe(ctx, s.doneChannel())
	if _, err := sub.Receive(ctx); err != nil {
		_ = sub.Close()
		return nil, fmt.Errorf("baseline: subscribe to %s: %w", s.doneChannel(), err)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for msg := range sub.Channel(redis.WithChannelSize(4096)) {
			s.done.mark(msg.Payload)
		}
	}()
	return func() {
		_ = sub.Close()
		<-ended
	}, nil
}

// awaitDone answers the roundtrip mode's long poll: 200 with status
// succeeded once the request's task has run, or queued when wait (a Go
// duration, as holdfast's ?wait=; capped at maxWait) passes first. It knows
// nothing of requests it did not see run, so an unknown id is queued too.
func (s *Server) awaitDone(c *fiber.Ctx) error {
	id, err := uuid.Parse(c.Params("id"))
	if err != nil {
		return fiber.NewError(fiber.StatusBadRequest, "request id must be a UUID")
	}
	var wait time.Duration
	if w := c.Query("wait"); w != "" {
		if wait, err = time.ParseDuration(w); err != nil || wait < 0 {
			return fiber.NewError(fiber.StatusBadRequest, "wait must be a duration such as 10s")
		}
	}
	status := "queued"
	if s.done.await(s.stopping, id.String(), min(wait, maxWait)) {
		status = "succeeded"
	}
	return c.JSON(fiber.Map{"requestId": id, "type": TaskType, "status": status})
}

// doneMarks are the roundtrip mode's requests announced done, kept for the
// process's life so that a poll asked again answers succeeded again: in a
// bench run, tens of bytes for each of its requests. A request's mark is
// made by whichever comes first, its announcement or a poll for it; a mark
// not announced is removed when the last poll waiting on it gives up, so
// polls for ids never announced leave nothing behind.
type doneMarks struct {
	mu sync.Mutex
	m  map[string]*doneMark
}

type doneMark struct {
	ch      chan struct{} // closed when announced
	waiters int           // polls waiting on it
}

func (d *doneMarks) getLocked(id string) *doneMark {
	m, ok := d.m[id]
	if !ok {
		m = &doneMark{ch: make(chan struct{})}
		d.m[id] = m
	}
	return m
}

// mark records that id's task has run.
func (d *doneMarks) mark(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m := d.getLocked(id)
	select {
	case <-m.ch:
	default:
		close(m.ch)
	}
}

// await reports whether id is marked done within wait, or before ctx ends.
func (d *doneMarks) await(ctx context.Context, id string, wait time.Duration) bool {
	d.mu.Lock()
	m := d.getLocked(id)
	m.waiters++
	d.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-m.ch:
	case <-t.C:
	case <-ctx.Done():
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	m.waiters--
	select {
	case <-m.ch:
		return true
	default:
		if m.waiters == 0 {
			delete(d.m, id)
		}
		return false
	}
}

// size is how many requests have a mark.
func (d *doneMarks) size() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.m)
}
