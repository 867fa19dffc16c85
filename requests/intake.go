package requests

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/storage"
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

// Dispatcher hands durable requests to the queue, in two steps: Post puts
// them in their keys' mailboxes, then Enqueue enqueues each one's task. The
// keyed engine implements it; intake declares only what it needs. Both steps
// are idempotent.
type Dispatcher interface {
	// Admit returns a *domain.Problem (429 OVERLOADED) when the queue or a
	// key's backlog is over its cap.
	Admit(ctx context.Context, queue string, keys []string) error
	// Post puts rs in their keys' mailboxes, all in one round trip, and
	// returns what it saw of each one's keys there.
	Post(ctx context.Context, rs []*Request) ([]Posting, error)
	// Enqueue enqueues the task of r, which Post put in its mailboxes as
	// posting says.
	Enqueue(ctx context.Context, r *Request, posting Posting) error
}

// MaxKeys is the most serialization keys one request may name. A drain
// applies a request only while it holds every one of its keys at once, and
// it holds at most keyed's maxGroupKeys, which is above MaxKeys whatever
// BATCH_MAX says: a request with more keys could never be applied, and every
// request behind it on one of its keys would wait with it. Intake refuses
// one (400 INVALID_INPUT) before storing it; a vertical whose writes may name
// more bounds them first with a rule of its own (the shop's MaxCartItems).
const MaxKeys = 64

// Posting is what Post saw of a request's keys right after the request
// entered their mailboxes; Enqueue decides from it when its task is due.
type Posting struct {
	Backlog int64 // the length of its longest mailbox
	// Held is true when the lease of one of its keys was held once it was
	// in the mailboxes: that holder, or a successor, applies the request or
	// makes way for the drain that gathers it, as a holder gives a key up
	// only when it finds the mailbox empty, or hands it on with a drain
	// task, or yields it for a request whose first key another holds (with
	// a drain task to follow), and the reconciler re-drives a key whose
	// holder died.
	Held bool
}

// Intake accepts writes: a request is durable in Postgres before Accept
// returns, so a 202 survives a crash of the API and a loss of Redis.
type Intake struct {
	store *Store
	disp  Dispatcher
	log   *slog.Logger
	group *groupCommit
	// CommitEach stores each submission in a transaction of its own,
	// instead of with the others that arrive meanwhile (group.go).
	CommitEach bool
	// Tracker, when set, is told of each new request before it is posted
	// to its mailboxes, so before a worker can announce it (the API's
	// Notifier).
	Tracker interface {
		Track(id uuid.UUID, owner string)
	}
}

// storeTimeout bounds a group commit's INSERT unless SetTimeout says less.
const storeTimeout = 30 * time.Second

// SetTimeout bounds each step a write's batch takes (the API's
// DEPENDENCY_TIMEOUT, which the configuration keeps positive): its INSERT,
// its settling, its post (postWithin at most). The caller's context bounds
// its own wait for them all, and its dispatch: Accept returns by the
// caller's deadline, give or take a mark of undispatched. 0 keeps the
// default.
func (in *Intake) SetTimeout(d time.Duration) { in.group.timeout = cmp.Or(d, storeTimeout) }

// NewIntake wires intake.
func NewIntake(store *Store, disp Dispatcher, log *slog.Logger) *Intake {
	in := &Intake{store: store, disp: disp, log: log}
	in.group = &groupCommit{store: store, post: in.postBatch, timeout: storeTimeout, turns: storage.Turns[*pending]{Max: maxBatch}}
	return in
}

// postBatch tracks and posts a group commit's stored batch.
func (in *Intake) postBatch(ctx context.Context, rs []*Request) ([]Posting, error) {
	if in.Tracker != nil {
		for _, r := range rs {
			in.Tracker.Track(r.ID, r.UserID)
		}
	}
	return in.disp.Post(ctx, rs)
}

// Accept makes sub durable and dispatches it. created is false when an
// idempotent replay returned an earlier request.
func (in *Intake) Accept(ctx context.Context, sub Submission) (r *Request, created bool, err error) {
	if sub.Type == "" || sub.Queue == "" || sub.UserID == "" || len(sub.Keys) == 0 {
		return nil, false, errors.New("requests: incomplete submission")
	}
	sub.Keys = NormalizeKeys(sub.Keys)
	if len(sub.Keys) > MaxKeys {
		return nil, false, domain.NewProblem(domain.CodeInvalidInput,
			"a write may name at most %d serialization keys; this one names %d", MaxKeys, len(sub.Keys))
	}
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
	p := &pending{sub: &sub, id: id, done: make(chan struct{})}
	posted, posting := false, Posting{}
	if in.CommitEach {
		in.store.storeBatch(ctx, []*pending{p}, in.group.timeout)
		if p.created && in.Tracker != nil {
			in.Tracker.Track(p.r.ID, p.r.UserID) // grouped, the batch's post tracks it (postBatch)
		}
	} else if posted, posting, err = in.group.insert(ctx, p); err != nil {
		return nil, false, err
	}
	if p.err != nil {
		return nil, false, p.err
	}
	if !p.r.Status.Terminal() {
		in.dispatch(ctx, p.r, posted, posting)
	}
	return p.r, p.created, nil
}

// dispatch posts r, unless the group commit already has (posted, with what
// it saw in posting), and enqueues its task, within the caller's ctx. r is
// durable by now, so a failed dispatch is not the client's problem: r is
// marked undispatched, with a bound of its own, and left to the
// reconciler, which re-drives requests Redis never saw. (It is not tried
// again here: a Redis that failed it is most likely away, and the API's
// breaker fails the next try at once, storage.Breaker.)
func (in *Intake) dispatch(ctx context.Context, r *Request, posted bool, posting Posting) {
	var err error
	if !posted {
		var postings []Posting
		if postings, err = in.disp.Post(ctx, []*Request{r}); err == nil {
			posting = postings[0]
		}
	}
	if err == nil {
		if err = in.disp.Enqueue(ctx, r, posting); err == nil {
			return
		}
	}
	if !errors.Is(err, storage.ErrRedisAway) { // which the breaker logs once
		in.log.WarnContext(ctx, "dispatch failed; the reconciler will re-drive it",
			"requestId", r.ID, "traceId", r.TraceID, "err", err)
	}
	// Keep later requests on its keys from overtaking it (K3).
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.group.timeout)
	defer cancel()
	if _, err := in.store.marks.Get(mctx, r.ID); err != nil {
		in.log.ErrorContext(ctx, "could not mark request undispatched", "requestId", r.ID, "err", err)
	}
}

// NormalizeKeys sorts and de-duplicates keys: the global order in which
// multi-key requests take their leases.
func NormalizeKeys(keys []string) []string {
	out := slices.Clone(keys)
	slices.Sort(out)
	return slices.Compact(out)
}
