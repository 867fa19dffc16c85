package requests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
)

// Submission is a validated write a vertical hands to intake.
type Submission struct {
	Type           string          // task type, e.g. "hold.create"
	Queue          string          // the vertical's Asynq queue
	UserID         string          // the user the write acts for
	Keys           []string        // serialization keys (K2); order does not matter
	Payload        json.RawMessage // what the worker's applier decodes
	Route          string          // scope of the idempotency key
	IdempotencyKey string          // optional
	// Fingerprint identifies what the client sent (method, path, canonical
	// body): a replay of the key must match it. Without it the payload is
	// compared, which a vertical may have filled from server state.
	Fingerprint []byte
	TraceID     string
}

// Dispatcher hands a durable request to the queue. The keyed engine
// implements it; intake declares only what it needs.
type Dispatcher interface {
	// Admit returns a *domain.Problem (429 OVERLOADED) when the queue or a
	// key's backlog is over its cap.
	Admit(ctx context.Context, queue string, keys []string) error
	// Dispatch puts r in its keys' mailboxes and enqueues its task.
	Dispatch(ctx context.Context, r *Request) error
}

// Intake accepts writes: a request is durable in Postgres before Accept
// returns, so a 202 survives a crash of the API and a loss of Redis.
type Intake struct {
	store *Store
	disp  Dispatcher
	log   *slog.Logger
	now   func() time.Time
	group *groupCommit
	// Tracker, when set, is told of each new request before it is
	// dispatched (the API's Notifier).
	Tracker interface {
		Track(id uuid.UUID, owner string)
	}
}

// NewIntake wires intake.
func NewIntake(store *Store, disp Dispatcher, log *slog.Logger) *Intake {
	return &Intake{store: store, disp: disp, log: log, now: time.Now, group: &groupCommit{store: store}}
}

// Accept makes sub durable and dispatches it. created is false when an
// idempotent replay returned an earlier request.
func (in *Intake) Accept(ctx context.Context, sub Submission) (r *Request, created bool, err error) {
	if sub.Type == "" || sub.Queue == "" || sub.UserID == "" || len(sub.Keys) == 0 {
		return nil, false, errors.New("requests: incomplete submission")
	}
	sub.Keys = NormalizeKeys(sub.Keys)
	if sub.Payload == nil {
		sub.Payload = json.RawMessage("{}")
	}
	if err := in.disp.Admit(ctx, sub.Queue, sub.Keys); err != nil {
		return nil, false, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, false, fmt.Errorf("requests: new id: %w", err)
	}
	if sub.IdempotencyKey == "" {
		r, err = in.group.insert(ctx, &sub, id, in.now().UTC())
		created = true
	} else {
		r, created, err = in.store.Insert(ctx, &sub, id, in.now().UTC())
	}
	if err != nil {
		return nil, false, err
	}
	if r.Status.Terminal() {
		return r, created, nil
	}
	if created && in.Tracker != nil {
		in.Tracker.Track(r.ID, r.UserID)
	}
	// The request is durable from here on. A failed dispatch is not the
	// client's problem: it is retried briefly (both steps are idempotent),
	// and the reconciler re-drives requests Redis never saw.
	for try := 0; ; try++ {
		err := in.disp.Dispatch(ctx, r)
		if err == nil {
			break
		}
		if try == 2 || ctx.Err() != nil {
			in.log.WarnContext(ctx, "dispatch failed; the reconciler will re-drive it",
				"requestId", r.ID, "traceId", r.TraceID, "err", err)
			// Keep later requests on its keys from overtaking it (K3).
			if merr := in.store.MarkUndispatched(context.WithoutCancel(ctx), r.ID); merr != nil {
				in.log.ErrorContext(ctx, "could not mark request undispatched", "requestId", r.ID, "err", merr)
			}
			break
		}
		time.Sleep(10 * time.Millisecond << (2 * try))
	}
	return r, created, nil
}

// NormalizeKeys sorts and de-duplicates keys: the global order in which
// multi-key requests take their leases.
func NormalizeKeys(keys []string) []string {
	out := slices.Clone(keys)
	slices.Sort(out)
	return slices.Compact(out)
}
