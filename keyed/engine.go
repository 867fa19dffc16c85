package keyed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/recent"
	"github.com/holdfast/holdfast/metrics"
	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/storage"
	"github.com/holdfast/holdfast/tasks"
)

// Batch is a run of consecutive requests of one type, applied in one
// transaction while the leases of all their keys are held.
type Batch struct {
	Requests []*requests.Request
	// Fences maps each held key to its lease token, for appliers that change
	// Redis state and must check the token in the same script.
	Fences map[string]int64
	Now    time.Time
	Worker string

	afterCommit []func(context.Context)
}

// AfterCommit runs f once the batch's transaction has committed (never if it
// rolls back). It suits side effects that must not happen for a rolled-back
// apply, such as removing a confirmed hold from Redis; a crash right after
// the commit skips them, so they must be safe to miss.
func (b *Batch) AfterCommit(f func(context.Context)) { b.afterCommit = append(b.afterCommit, f) }

// Committed runs what the applier asked for with AfterCommit. Whoever
// commits the batch's transaction calls it, once, after the commit.
func (b *Batch) Committed(ctx context.Context) {
	for _, f := range b.afterCommit {
		f(ctx)
	}
}

// Applier applies batches of one write type. It returns one outcome per
// request, in order. An error means a system failure: the whole transaction
// is rolled back and retried, then narrowed to single requests; a request that
// keeps failing is recorded as failed.
type Applier interface {
	Apply(ctx context.Context, tx pgx.Tx, b *Batch) ([]requests.Outcome, error)
}

// ApplierFunc adapts a function to Applier.
type ApplierFunc func(ctx context.Context, tx pgx.Tx, b *Batch) ([]requests.Outcome, error)

// Apply calls f.
func (f ApplierFunc) Apply(ctx context.Context, tx pgx.Tx, b *Batch) ([]requests.Outcome, error) {
	return f(ctx, tx, b)
}

// Type is a write type: its task type name, its queue and how it applies.
type Type struct {
	Name    string
	Queue   string
	Applier Applier
	// Family, when set, names write types decided together: consecutive
	// requests of the types of one family reach their Applier in one call
	// (a hotel's creates, confirms and cancels of holds). Else a call gets
	// requests of one type.
	Family string
}

// Options tune the engine; zero values take the defaults of config.Config.
type Options struct {
	LeaseTTL     time.Duration // lease lifetime; a holder extends it at every look at its mailboxes and while a transaction runs
	BatchMax     int           // requests per apply transaction
	DrainSlice   time.Duration // longest one task holds a key before handing it on
	RedriveAfter time.Duration // how long a request may stay open before the reconciler looks at it
	KeyCap       int           // backlog per key above which intake answers 429
	QueueCap     int           // tasks per queue above which intake answers 429
	DeferAfter   int           // backlog on a key beyond which new tasks are deferred (K4), as they are while the key is held
	// ScheduleDeferred schedules each deferred task a minute or more ahead
	// to run by itself, instead of adding it to the Asynq group the
	// worker folds into one task (deferred.go).
	ScheduleDeferred bool
	// EnqueueEach sends each Asynq enqueue to Redis by itself, instead of
	// with those of concurrent writes in one pipeline (storage.BatchScripts).
	EnqueueEach bool
	// PlainWaiting makes every look of a drain that waits for keys other
	// drains hold a whole step, on its timer alone, instead of quiet
	// waiting (waiting.go).
	PlainWaiting bool
	Worker       string // name of this process, for logs and the probe's log
	// ForgetAfter is how long a key's fencing state outlives its last
	// acquire (doc.go, "Forgetting"): its Redis fence key expires and Forget
	// deletes its key_fences row, and a token older than this is refused.
	ForgetAfter time.Duration
}

// WithDefaults is o with every zero value set to its default:
// config.Config's (wiring.KeyedOptions passes its values) and DeferAfter's,
// which has no setting, for engines built with fewer options, as tests
// build them. New applies it.
func (o Options) WithDefaults() Options {
	orDefault(&o.LeaseTTL, 5*time.Second)
	orDefault(&o.BatchMax, 256)
	orDefault(&o.DrainSlice, 5*time.Second)
	orDefault(&o.ForgetAfter, time.Hour)
	orDefault(&o.RedriveAfter, 3*time.Second)
	orDefault(&o.KeyCap, 200_000)
	orDefault(&o.QueueCap, 1_000_000)
	orDefault(&o.DeferAfter, 64)
	o.Worker = cmp.Or(o.Worker, "worker")
	return o
}

// orDefault sets *v to d unless it is positive.
func orDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Engine is the per-key serialization engine. The API uses it to admit and
// dispatch requests; the worker to apply them.
type Engine struct {
	pool   *pgxpool.Pool
	rdb    redis.UniversalClient
	client *asynq.Client
	insp   *asynq.Inspector
	store  *requests.Store
	log    *slog.Logger
	m      *metrics.Pipeline
	opt    Options
	types  map[string]Type

	stopping atomic.Bool
	wakers   wakers

	// incarnation is the key a step reads Redis' incarnation from, after
	// its peeks (renew): "" on Redis Cluster, where it tells nothing of the
	// state of the other nodes.
	incarnation string

	// backlog is what this API's posts saw of each key's mailbox, for
	// Admit. A sample counts for a second, and the map forgets it after one
	// to two seconds, or sooner once backlogKeys keys were posted to since:
	// it holds at most 2·backlogKeys samples however many keys the engine
	// ever saw. A key forgotten early is let through Admit once, as a key
	// this API has not posted to is.
	backlog *recent.Map[string, backlogSample]
	qsizes  *recent.Sampler[string, int] // for Admit
}

// New builds an engine. insp may be nil in processes that do not admit
// requests (workers).
func New(pool *pgxpool.Pool, rdb redis.UniversalClient, insp *asynq.Inspector, log *slog.Logger, m *metrics.Pipeline, opt Options) *Engine {
	opt = opt.WithDefaults()
	enqueue := storage.BatchScripts(rdb)
	if opt.EnqueueEach {
		enqueue = rdb
	}
	incarnation := incarnationKey
	if _, cluster := rdb.(*redis.ClusterClient); cluster {
		incarnation = ""
	}
	e := &Engine{
		pool: pool, rdb: rdb, insp: insp, log: log, m: m, opt: opt, incarnation: incarnation,
		client:  asynq.NewClientFromRedisClient(enqueue),
		store:   requests.NewStore(pool),
		types:   make(map[string]Type),
		wakers:  wakers{by: make(map[string]*waiter)},
		backlog: recent.New[string, backlogSample](time.Second, backlogKeys),
	}
	e.qsizes = recent.NewSampler(time.Second, e.readQueueSize)
	return e
}

// Register adds a write type.
func (e *Engine) Register(t Type) {
	if t.Name == "" || t.Queue == "" || t.Applier == nil {
		panic("keyed: incomplete type " + t.Name)
	}
	e.types[t.Name] = t
	e.m.InitType(t.Name) // its outcome and latency series, at 0 before the first
}

// Queues returns the queues of the registered types plus the maintenance
// queue, sorted.
func (e *Engine) Queues() []string {
	q := []string{tasks.MaintenanceQueue}
	for _, t := range e.types {
		q = append(q, t.Queue)
	}
	slices.Sort(q)
	return slices.Compact(q)
}

// Handle registers the engine's task handlers on mux.
func (e *Engine) Handle(mux *asynq.ServeMux) {
	for name := range e.types {
		mux.HandleFunc(name, e.handleRequest)
	}
	mux.HandleFunc(tasks.TypeDrain, e.handleDrain)
	mux.HandleFunc(tasks.TypeDeferred, e.handleDeferred)
	mux.HandleFunc(tasks.TypeReconcile, func(ctx context.Context, _ *asynq.Task) error { return e.Reconcile(ctx) })
}

// Stop makes every drain hand its key over after its current batch. Call it
// after the Asynq server stopped fetching and before it shuts down.
func (e *Engine) Stop() { e.stopping.Store(true) }

// Close releases the engine's Asynq client.
func (e *Engine) Close() error { return e.client.Close() }

func (e *Engine) handleRequest(ctx context.Context, t *asynq.Task) error {
	var p tasks.RequestPayload
	if err := tasks.Decode(t, &p); err != nil {
		return err
	}
	if len(p.Keys) == 0 {
		return fmt.Errorf("request %s has no keys: %w", p.RequestID, asynq.SkipRetry)
	}
	q, _ := asynq.GetQueueName(ctx)
	return e.Drain(ctx, requests.NormalizeKeys(p.Keys)[0], q)
}

func (e *Engine) handleDrain(ctx context.Context, t *asynq.Task) error {
	var p tasks.DrainPayload
	if err := tasks.Decode(t, &p); err != nil {
		return err
	}
	q, _ := asynq.GetQueueName(ctx)
	return e.Drain(ctx, p.Key, q)
}

// enqueueDrain asks for key to be drained; id de-duplicates one cause.
func (e *Engine) enqueueDrain(ctx context.Context, queue, key, id string, delay time.Duration) error {
	t, err := tasks.NewDrain(queue, key, id, delay)
	if err != nil {
		return err
	}
	if _, err := e.client.EnqueueContext(ctx, t); err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return fmt.Errorf("keyed: enqueue drain %s: %w", key, err)
	}
	return nil
}

func tokenID(prefix string, tok int64) string { return prefix + strconv.FormatInt(tok, 10) }
