package keyed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/domain"
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
}

// Options tune the engine; zero values take the defaults of config.Config.
type Options struct {
	LeaseTTL     time.Duration // lease lifetime; a holder extends it every batch
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
	Worker      string // name of this process, for logs and the probe's log
	// ForgetAfter is how long a key's fencing state outlives its last
	// acquire (doc.go, "Forgetting"): its Redis fence key expires and Forget
	// deletes its key_fences row, and a token older than this is refused.
	ForgetAfter time.Duration
}

func (o *Options) defaults() {
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 5 * time.Second
	}
	if o.BatchMax <= 0 {
		o.BatchMax = 256
	}
	if o.DrainSlice <= 0 {
		o.DrainSlice = 5 * time.Second
	}
	if o.ForgetAfter <= 0 {
		o.ForgetAfter = time.Hour
	}
	if o.RedriveAfter <= 0 {
		o.RedriveAfter = 3 * time.Second
	}
	if o.KeyCap <= 0 {
		o.KeyCap = 200_000
	}
	if o.QueueCap <= 0 {
		o.QueueCap = 1_000_000
	}
	if o.DeferAfter <= 0 {
		o.DeferAfter = 64
	}
	if o.Worker == "" {
		o.Worker = "worker"
	}
}

// Engine is the per-key serialization engine. The API uses it to admit and
// dispatch requests; the worker to apply them.
type Engine struct {
	// local marks the keys a drain of this process holds (key → *drain).
	local  sync.Map
	pool   *pgxpool.Pool
	rdb    redis.UniversalClient
	client *asynq.Client
	insp   *asynq.Inspector
	store  *requests.Store
	log    *slog.Logger
	m      *metrics.Pipeline
	opt    Options
	types  map[string]Type
	now    func() time.Time

	stopOnce sync.Once
	stopping chan struct{}

	// backlog is what this API's posts saw of each key's mailbox, for
	// Admit. A sample counts for a second, and the map forgets it after one
	// to two seconds, or sooner once backlogKeys keys were posted to since:
	// it holds at most 2·backlogKeys samples however many keys the engine
	// ever saw. A key forgotten early is let through Admit once, as a key
	// this API has not posted to is.
	backlog *recent.Map[string, backlogSample]

	qmu    sync.Mutex
	qsizes map[string]queueSample
}

// backlogKeys bounds the backlog samples an engine keeps (see backlog):
// at about 100 B a sample, at most 10 MiB.
const backlogKeys = 50_000

type backlogSample struct {
	n  int64
	at time.Time
}

type queueSample struct {
	n          int
	at         time.Time
	refreshing bool
}

// New builds an engine. insp may be nil in processes that do not admit
// requests (workers).
func New(pool *pgxpool.Pool, rdb redis.UniversalClient, insp *asynq.Inspector, log *slog.Logger, m *metrics.Pipeline, opt Options) *Engine {
	opt.defaults()
	enqueue := storage.BatchScripts(rdb)
	if opt.EnqueueEach {
		enqueue = rdb
	}
	return &Engine{
		pool:     pool,
		rdb:      rdb,
		client:   asynq.NewClientFromRedisClient(enqueue),
		insp:     insp,
		store:    requests.NewStore(pool),
		log:      log,
		m:        m,
		opt:      opt,
		types:    make(map[string]Type),
		now:      time.Now,
		stopping: make(chan struct{}),
		qsizes:   make(map[string]queueSample),
		backlog:  recent.New[string, backlogSample](time.Second, backlogKeys),
	}
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
func (e *Engine) Stop() { e.stopOnce.Do(func() { close(e.stopping) }) }

func (e *Engine) stopped() bool {
	select {
	case <-e.stopping:
		return true
	default:
		return false
	}
}

// Close releases the engine's Asynq client.
func (e *Engine) Close() error { return e.client.Close() }

// overloaded is the 429 intake answers when a backlog is over its cap.
func overloaded(what string, retryAfter int) *domain.Problem {
	return domain.NewProblem(domain.CodeOverloaded,
		"%s is over its backlog cap; retry later", what).WithMeta("retryAfterSeconds", retryAfter)
}

// Admit refuses work over the key and queue caps. Backlog sizes come from a
// one-second cache that Post feeds with what it sees of each key's mailbox,
// so Admit costs no round trip: a key this API posted to within the last
// second is held to its cap, and a key it has not is let through (its
// backlog cannot have grown past the cap through this API, and the next
// request on it is held to what this one's post sees). A key that each
// request brings anew (a shopper's) so never costs a round trip before its
// request is stored.
func (e *Engine) Admit(ctx context.Context, queue string, keys []string) error {
	now := e.now()
	for _, k := range keys {
		if s, ok := e.backlog.Get(k); ok && now.Sub(s.at) < time.Second && s.n >= int64(e.opt.KeyCap) {
			e.m.Overloaded.WithLabelValues(queue).Inc()
			return overloaded("key "+k, 1)
		}
	}
	if n := e.queueSize(queue); n >= e.opt.QueueCap {
		e.m.Overloaded.WithLabelValues(queue).Inc()
		return overloaded("queue "+queue, 5)
	}
	return nil
}

// queueSize returns the queue's unfinished tasks, refreshed at most once a
// second by one caller while the others use the last sample; without an
// inspector, or on error, it reports 0 (admit).
func (e *Engine) queueSize(queue string) int {
	if e.insp == nil {
		return 0
	}
	e.qmu.Lock()
	s, ok := e.qsizes[queue]
	if (ok && e.now().Sub(s.at) < time.Second) || s.refreshing {
		e.qmu.Unlock()
		return s.n
	}
	s.refreshing = true
	e.qsizes[queue] = s
	e.qmu.Unlock()

	n := s.n
	if info, err := e.insp.GetQueueInfo(queue); err == nil {
		n = info.Pending + info.Active + info.Scheduled + info.Retry + info.Aggregating
	}
	e.qmu.Lock()
	e.qsizes[queue] = queueSample{n: n, at: e.now()}
	e.qmu.Unlock()
	return n
}

// Dispatch adds r to its keys' mailboxes and enqueues its task. Both steps
// are idempotent, so the reconciler may repeat them.
func (e *Engine) Dispatch(ctx context.Context, r *requests.Request) error {
	postings, err := e.Post(ctx, []*requests.Request{r})
	if err != nil {
		return err
	}
	return e.Enqueue(ctx, r, postings[0])
}

// Post puts rs in their keys' mailboxes (scored by seq), all in one round
// trip, and returns what it saw right after each was added: the length of
// its longest mailbox and, for a request on one key, whether that key's
// lease was held. Intake posts a group commit's whole batch at once.
func (e *Engine) Post(ctx context.Context, rs []*requests.Request) ([]requests.Posting, error) {
	// A request is told whether its first key (the one its task drains) was
	// held once it was in the mailboxes; one read per key serves all of a
	// batch's requests on it.
	held := map[string]*redis.IntCmd{}
	pipe := e.rdb.Pipeline()
	cards := make([][]*redis.IntCmd, len(rs))
	for i, r := range rs {
		member := r.ID.String()
		cards[i] = make([]*redis.IntCmd, len(r.Keys))
		for j, k := range r.Keys {
			pipe.ZAddNX(ctx, mboxKey(k), redis.Z{Score: float64(r.Seq), Member: member})
			cards[i][j] = pipe.ZCard(ctx, mboxKey(k))
		}
	}
	// Read after every ZADD: a holder seen now finds the requests in the
	// mailbox before it can let the key go (a release is atomic with finding
	// the mailbox empty, a hand-off enqueues a drain, and the reconciler
	// re-drives a key whose holder died). Under Redis Cluster, a slot
	// migrating mid-pipeline can have the read answered first; the request
	// then waits for the reconciler, not forever.
	for _, r := range rs {
		if k := r.Keys[0]; held[k] == nil {
			held[k] = pipe.Exists(ctx, leaseKey(k))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("keyed: mailbox: %w", err)
	}
	now := e.now()
	postings := make([]requests.Posting, len(rs))
	for i, r := range rs {
		for j, k := range r.Keys {
			n := cards[i][j].Val()
			e.backlog.Put(k, backlogSample{n, now})
			postings[i].Backlog = max(postings[i].Backlog, n)
		}
		postings[i].Held = held[r.Keys[0]].Val() == 1
	}
	return postings, nil
}

// Enqueue enqueues r's task (TaskID = requestId), deferred when
// something else applies r first (see deferral). r must be in its mailboxes
// already: a task that finds its key's mailbox empty does nothing.
func (e *Engine) Enqueue(ctx context.Context, r *requests.Request, p requests.Posting) error {
	var later []asynq.Option
	if d := deferral(p, e.opt.DeferAfter); d > 0 {
		later = append(later, e.laterOption(d))
	}
	t, err := tasks.NewRequest(r.Type, r.Queue, r.ID.String(), r.Keys, r.Seq, later...)
	if err != nil {
		return err
	}
	if _, err := e.client.EnqueueContext(ctx, t); err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return fmt.Errorf("keyed: enqueue: %w", err)
	}
	return nil
}

// deferral is how long to defer the task of a request that something
// else applies first: the holder of its first key (whose group gathers the
// rest, group.go), when that key was held as the request entered its
// mailboxes, or the drain that the tasks of the requests ahead of
// it start, when it waits behind more than after others. The key's holder
// applies such a request in order whatever its task does, and the
// reconciler, not the task, recovers a key whose holder died; the task is
// there so Asynqmon shows the request (K1). Deferring it (deferred.go:
// folded with others into one task, or scheduled well past the expected
// drain) keeps one hot key's tasks from filling the pending list ahead of
// every other key (K4), even when they were accepted while no worker ran,
// and leaves the worker's slots and Redis to the drain while a rush lasts;
// it runs later as a no-op. A request that nothing else would apply, the
// doorbell of an idle key, has its task due at once. The duration is the
// schedule's; a folded task waits for the aggregator instead.
func deferral(p requests.Posting, after int) time.Duration {
	if p.Backlog <= int64(after) && !p.Held {
		return 0
	}
	return min(time.Minute+time.Duration(p.Backlog)*time.Millisecond, 10*time.Minute)
}

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
