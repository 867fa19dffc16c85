// Package tasks names holdfast's Asynq task types and builds their payloads,
// following asynq's convention: Type constants, payload structs, New…
// constructors. Write types (hold.create, …) are one task per accepted
// request, with TaskID = requestId (K1); the pipeline adds the types below.
package tasks

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

// Pipeline task types.
const (
	// TypeDrain asks a worker to take a key's lease and apply its mailbox.
	TypeDrain = "keyed:drain"
	// TypeReconcile re-drives accepted requests Redis lost and drains keys
	// whose mailbox has no live owner (SPEC §7).
	TypeReconcile = "pipeline:reconcile"
	// TypeRetention deletes the terminal requests past REQUEST_RETENTION.
	TypeRetention = "pipeline:retention"
	// TypeForget deletes the fencing state of keys gone idle.
	TypeForget = "pipeline:forget"
	// TypeDeferred is the deferred tasks of many requests folded into one
	// (keyed/deferred.go): it drains each of their first keys once.
	TypeDeferred = "keyed:deferred"
)

// MaintenanceQueue carries the periodic tasks.
const MaintenanceQueue = "maintenance"

// PeriodicRetries is how often a periodic task that failed is tried again
// before it is archived: with the worker's backoff (0.2 s doubling) its
// tries span about 12 s, so a blip of Postgres or Redis (a restart, a
// failover) does not archive it and fire HoldfastTasksArchived. Periodic
// tasks are idempotent, and a retry that overlaps the next period's copy is
// harmless.
const PeriodicRetries = 6

// RequestPayload is the payload of a write task.
type RequestPayload struct {
	RequestID string   `json:"requestId"`
	Keys      []string `json:"keys"`
	Seq       int64    `json:"seq,omitempty"` // its requests.Request.Seq (0: not given)
}

// NewRequest builds the task of one accepted request; later, when given,
// says how it waits (asynq.ProcessIn or asynq.Group).
func NewRequest(typ, queue, requestID string, keys []string, seq int64, later ...asynq.Option) (*asynq.Task, error) {
	b, err := json.Marshal(RequestPayload{RequestID: requestID, Keys: keys, Seq: seq})
	if err != nil {
		return nil, err
	}
	opts := []asynq.Option{asynq.TaskID(requestID), asynq.Queue(queue), asynq.MaxRetry(25)}
	return asynq.NewTask(typ, b, append(opts, later...)...), nil
}

// DeferredPayload is the payload of a folded deferred task: the distinct
// first keys of its requests, for each the highest seq among them (0: not
// known), and how many requests it stands for.
type DeferredPayload struct {
	Keys     []string `json:"keys"`
	Through  []int64  `json:"through"`
	Requests int      `json:"requests"`
}

// NewDeferred builds the task that stands for the deferred request tasks
// of p. The aggregator enqueues it in the group's queue.
func NewDeferred(p DeferredPayload, opts ...asynq.Option) *asynq.Task {
	b, _ := json.Marshal(p) // strings and ints always marshal
	return asynq.NewTask(TypeDeferred, b, append([]asynq.Option{asynq.MaxRetry(25)}, opts...)...)
}

// DrainPayload is the payload of a drain task.
type DrainPayload struct {
	Key string `json:"key"`
}

// NewDrain builds a drain task; id de-duplicates drains of one cause.
func NewDrain(queue, key, id string, delay time.Duration) (*asynq.Task, error) {
	b, err := json.Marshal(DrainPayload{Key: key})
	if err != nil {
		return nil, err
	}
	opts := []asynq.Option{asynq.TaskID("drain:" + key + ":" + id), asynq.Queue(queue), asynq.MaxRetry(25)}
	if delay > 0 {
		opts = append(opts, asynq.ProcessIn(delay))
	}
	return asynq.NewTask(TypeDrain, b, opts...), nil
}

// NewReconcile builds the periodic reconcile task.
func NewReconcile(every time.Duration) *asynq.Task {
	return asynq.NewTask(TypeReconcile, nil, asynq.Queue(MaintenanceQueue), asynq.MaxRetry(PeriodicRetries),
		asynq.Unique(max(every-500*time.Millisecond, time.Second)))
}

// Decode unmarshals a payload; a payload that cannot decode will never
// succeed, so the error wraps asynq.SkipRetry.
func Decode(t *asynq.Task, v any) error {
	if err := json.Unmarshal(t.Payload(), v); err != nil {
		return fmt.Errorf("decode %s payload: %w: %w", t.Type(), err, asynq.SkipRetry)
	}
	return nil
}
