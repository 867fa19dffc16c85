package requests

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/storage"
)

func pendingBatch(t *testing.T, n int, payload string) []*pending {
	batch := make([]*pending, n)
	for i := range batch {
		id, err := uuid.NewV7()
		require.NoError(t, err)
		batch[i] = &pending{id: id, done: make(chan struct{}), sub: &Submission{
			Type: "t", Queue: "q", UserID: "u", Keys: []string{"k"}, Payload: json.RawMessage(payload)}}
	}
	return batch
}

// A flush whose INSERT failed after its rows were stored (as when the
// connection drops during the commit) still hands every caller its stored
// request; a flush that stored nothing hands every caller the error.
func TestGroupFlushResolvesAFailedInsertByWhatIsStored(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	g := &groupCommit{store: NewStore(pool), timeout: time.Minute,
		post: func(_ context.Context, rs []*Request) ([]Posting, error) { return make([]Posting, len(rs)), nil }}
	ctx := context.Background()

	stored := pendingBatch(t, 3, `{}`)
	first, err := g.store.insertMany(ctx, stored)
	require.NoError(t, err)
	bad := pendingBatch(t, 1, `{`)[0] // not JSON: with it the INSERT fails, and these rows are there
	g.flush(ctx, append(slices.Clone(stored), bad))
	<-bad.done
	require.Error(t, bad.err)
	for _, p := range stored {
		<-p.done
		require.NoError(t, p.err)
		require.Equal(t, first[p.id].seq, p.r.Seq)
		require.Equal(t, first[p.id].at, p.r.AcceptedAt, "read back, the stamp Postgres gave it")
		require.True(t, p.created)
	}

	lost := pendingBatch(t, 3, `{`) // not JSON: the INSERT fails and stores nothing
	g.flush(ctx, lost)
	for _, p := range lost {
		<-p.done
		require.Error(t, p.err)
		require.Nil(t, p.r)
	}
}

// Batches reach their mailboxes in seq order even when an earlier batch's
// post is slow: each waits for the one before, so a drain never sees a
// later batch without the earlier one. Without the wait the second batch,
// posted at once, would arrive first.
func TestGroupPostsBatchesInSeqOrder(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	var mu sync.Mutex
	var order []int64
	calls := 0
	g := &groupCommit{store: NewStore(pool), timeout: time.Minute, post: func(_ context.Context, rs []*Request) ([]Posting, error) {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if first {
			// Time enough for the second post to overtake, were it not
			// waiting; waiting, it is not called at all, so no event says so.
			time.Sleep(150 * time.Millisecond)
		}
		mu.Lock()
		order = append(order, rs[0].Seq)
		mu.Unlock()
		return make([]Posting, len(rs)), nil
	}}
	ctx := context.Background()
	a, b := pendingBatch(t, 2, `{}`), pendingBatch(t, 2, `{}`)
	g.flush(ctx, a)
	g.flush(ctx, b)
	<-a[0].done
	<-b[0].done
	require.Less(t, a[0].r.Seq, b[0].r.Seq)
	require.Equal(t, []int64{a[0].r.Seq, b[0].r.Seq}, order)
	for _, p := range append(a, b...) {
		<-p.done
		require.True(t, p.posted)
	}
}

// A post that panics counts as failed: every caller is still woken, none
// counts as posted, so each posts its own request.
func TestGroupPostThatPanicsLeavesEachCallerToPost(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	g := &groupCommit{store: NewStore(pool), timeout: time.Minute, post: func(context.Context, []*Request) ([]Posting, error) {
		panic("post broke")
	}}
	batch := pendingBatch(t, 3, `{}`)
	g.flush(context.Background(), batch)
	for _, p := range batch {
		<-p.done
		require.NoError(t, p.err)
		require.NotNil(t, p.r, "stored")
		require.False(t, p.posted)
	}
}

// A batch whose INSERT panics answers every submission in it with an
// error, so none of its callers is left waiting, and the panic goes on.
func TestGroupFlushThatPanicsAnswersEveryCaller(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	g := &groupCommit{store: NewStore(pool), timeout: time.Minute,
		post: func(_ context.Context, rs []*Request) ([]Posting, error) { return make([]Posting, len(rs)), nil }}
	batch := pendingBatch(t, 3, `{}`)
	batch[1].sub = nil // encoding its keys panics
	require.Panics(t, func() { g.flush(context.Background(), batch) })
	for _, p := range batch {
		<-p.done
		require.ErrorIs(t, p.err, errGroupCommit)
		require.Nil(t, p.r)
	}
	require.Nil(t, g.posted, "no post was started")
}

// A write whose id a tombstone took before its INSERT ran (a read settled
// the id of a caller that gave up) is not stored, and the rest of its
// batch is: the INSERT leaves that row out instead of failing on the key.
// With GROUP_COMMIT=false a write is stored alone, as a batch of one, and
// the same holds.
func TestAWriteWhoseIDATombstoneTookIsLeftOut(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	s := NewStore(pool)
	ctx := context.Background()
	for _, n := range []int{3, 1} {
		batch := pendingBatch(t, n, `{}`)
		gone := batch[0]
		require.NoError(t, s.Settle(ctx, []uuid.UUID{gone.id}, []string{gone.sub.UserID}))
		s.storeBatch(ctx, batch, time.Minute)
		require.ErrorIs(t, gone.err, errTombstoned)
		require.True(t, storage.Unavailable(gone.err), "503 to anyone who asks")
		got, err := s.Get(ctx, gone.id)
		require.NoError(t, err)
		require.Equal(t, TypeNotStored, got.Type, "the tombstone stands")
		for _, p := range batch[1:] {
			require.NoError(t, p.err)
			require.True(t, p.created)
		}
	}
}

// Writes with an Idempotency-Key are stored with the rest, in the group
// commit's one INSERT: a key used before replays its request, or is
// refused when the body differs; two writes of one key in a batch are one
// request, the first stored, the second its replay. Only what was stored
// is posted: a replay's caller dispatches it again itself, harmlessly.
func TestGroupCommitStoresIdempotentWritesWithTheRest(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	var posted []*Request
	g := &groupCommit{store: NewStore(pool), timeout: time.Minute, post: func(_ context.Context, rs []*Request) ([]Posting, error) {
		posted = append(posted, rs...)
		return make([]Posting, len(rs)), nil
	}}
	ctx := context.Background()
	idem := func(p *pending, key, body string) *pending {
		p.sub.Route, p.sub.IdempotencyKey, p.sub.Fingerprint = "POST /t", key, []byte(body)
		return p
	}
	flush := func(batch []*pending) {
		g.flush(ctx, batch)
		for _, p := range batch {
			<-p.done
		}
	}
	earlier := pendingBatch(t, 2, `{}`)
	idem(earlier[0], "used", "a")
	idem(earlier[1], "reused", "a")
	flush(earlier)
	for _, p := range earlier {
		require.NoError(t, p.err)
		require.True(t, p.created)
	}

	batch := pendingBatch(t, 6, `{}`)
	fresh, replayed, reused := idem(batch[0], "fresh", "a"), idem(batch[1], "used", "a"), idem(batch[2], "reused", "b")
	twice, again, plain := idem(batch[3], "twice", "a"), idem(batch[4], "twice", "a"), batch[5]
	posted = nil
	flush(batch)

	var ids []uuid.UUID
	for _, p := range []*pending{fresh, twice, plain} {
		require.NoError(t, p.err)
		require.True(t, p.created)
		require.True(t, p.posted)
		ids = append(ids, p.r.ID)
	}
	require.Len(t, posted, 3, "replays are not posted by the batch")
	require.ElementsMatch(t, ids, []uuid.UUID{posted[0].ID, posted[1].ID, posted[2].ID})
	var transactions int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(DISTINCT xmin::text) FROM requests WHERE id = ANY($1)`, ids).Scan(&transactions))
	require.Equal(t, 1, transactions, "stored by one INSERT")

	require.NoError(t, replayed.err)
	require.False(t, replayed.created)
	require.Equal(t, earlier[0].r.ID, replayed.r.ID)
	require.NoError(t, again.err)
	require.False(t, again.created)
	require.Equal(t, twice.r.ID, again.r.ID, "the same key twice in one batch")
	require.ErrorIs(t, reused.err, ErrIdempotencyKeyReused)
	require.Nil(t, reused.r)
}

// A replay whose request retention deleted between the INSERT that found
// its key taken and the read of that request is answered with a conflict
// (409), which the client sends again: never a 5xx, never another request.
func TestReplayOfADeletedRequestIsAConflict(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	s := NewStore(pool)
	p := pendingBatch(t, 1, `{}`)[0]
	p.sub.Route, p.sub.IdempotencyKey = "POST /t", "gone"
	s.replay(context.Background(), []*pending{p}) // as storeBatch does once the INSERT skipped it
	require.ErrorIs(t, p.err, domain.ErrConflict)
	require.Nil(t, p.r)
}

// Two batches that take the same Idempotency-Keys in opposite orders (two
// API processes, a client sending two writes through both) deadlock in
// Postgres, which rolls one statement back. That batch is stored again, not
// failed: its writes are replays of the other's now. The other batch is a
// transaction the test holds open, set never to give up first. The batch
// talks through a proxy that holds what it sends after the deadlock until
// the other transaction has its row: sent at once, the batch's retry could
// take k1 before the other's waiting INSERT did, and deadlock again (on a
// busy machine it did, three times in a row).
func TestBatchThatLosesADeadlockIsStoredAgain(t *testing.T) {
	t.Parallel()
	url, pool := testenv.Postgres(t)
	ctx := context.Background()
	proxy := newHeldProxy(t, pool.Config().ConnConfig)
	through, err := storage.OpenPostgres(ctx, url, 3, func(c *pgxpool.Config) {
		c.ConnConfig.Host, c.ConnConfig.Port = proxy.host, proxy.port
	})
	require.NoError(t, err)
	t.Cleanup(through.Close)
	s := NewStore(through)
	batch := pendingBatch(t, 3, `{}`)
	for i, key := range []string{"k1", "k2"} {
		batch[i].sub.Route, batch[i].sub.IdempotencyKey, batch[i].sub.Fingerprint = "POST /t", key, []byte("same")
	}
	other, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer other.Rollback(ctx)
	var otherPID int
	require.NoError(t, other.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&otherPID))
	_, err = other.Exec(ctx, `SET LOCAL deadlock_timeout = '1min'`)
	require.NoError(t, err)
	theirs := map[string]uuid.UUID{}
	insert := func(p *pending) {
		t.Helper()
		theirs[p.sub.IdempotencyKey] = uuid.New()
		_, err := other.Exec(ctx, `INSERT INTO requests (id, type, queue, user_id, keys, payload, idem_route, idem_key, body_hash, accepted_at)
			VALUES ($1, 't', 'q', 'u', '{k}', '{}', 'POST /t', $2, $3, now())`, theirs[p.sub.IdempotencyKey], p.sub.IdempotencyKey, bodyHash(p.sub))
		require.NoError(t, err)
	}
	insert(batch[1]) // k2

	stored := make(chan struct{})
	go func() {
		defer close(stored)
		s.storeBatch(ctx, batch, time.Minute) // k1, then waits for k2
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)))`,
			otherPID).Scan(&waiting))
		return waiting
	}, 10*time.Second, 10*time.Millisecond, "the batch waits for k2")
	proxy.pauseSending() // the batch's INSERT is in; its retry waits in the proxy
	insert(batch[0])     // k1: a deadlock, and the batch's statement is the one rolled back
	proxy.resumeSending()
	require.NoError(t, other.Commit(ctx))
	<-stored

	for _, p := range batch[:2] {
		require.NoError(t, p.err)
		require.False(t, p.created)
		require.Equal(t, theirs[p.sub.IdempotencyKey], p.r.ID)
	}
	require.NoError(t, batch[2].err)
	require.True(t, batch[2].created, "the write without a key is stored")
}

// An INSERT that outlives its bound is answered as failed only once it
// cannot commit any more. Its connection is dropped at the bound, but its
// backend goes on until Postgres hears of it (pgx sends a cancel request on
// a connection of its own, which here a proxy holds up): it was waiting for
// another API's uncommitted row of the same Idempotency-Key, and once that
// rolled back it stored the write its caller had been told failed, to be
// applied by the reconciler, and stored again if the client retried
// (checked: the test fails so). storeBatch settles the write before it
// answers: a tombstone takes its id, and the INSERT, once free to go on,
// finds the id taken and stores nothing.
func TestAnInsertAnsweredAsFailedIsNotStoredAfterwards(t *testing.T) {
	t.Parallel()
	url, pool := testenv.Postgres(t)
	ctx := context.Background()
	proxy := newHeldProxy(t, pool.Config().ConnConfig)
	through, err := storage.OpenPostgres(ctx, url, 3, func(c *pgxpool.Config) {
		c.ConnConfig.Host, c.ConnConfig.Port = proxy.host, proxy.port
	})
	require.NoError(t, err)
	t.Cleanup(through.Close)
	var conns []*pgxpool.Conn // opened now: only connections opened later are held up
	for range 3 {
		c, err := through.Acquire(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}

	p := pendingBatch(t, 1, `{}`)[0]
	p.sub.Route, p.sub.IdempotencyKey = "POST /t", "K"
	other, err := pool.Begin(ctx) // another API's write of the same key, not committed yet
	require.NoError(t, err)
	_, err = other.Exec(ctx, `INSERT INTO requests (id, type, queue, user_id, keys, payload, idem_route, idem_key, body_hash, accepted_at)
		VALUES (gen_random_uuid(), 't', 'q', 'u', '{k}', '{}', 'POST /t', 'K', '\x00', now())`)
	require.NoError(t, err)

	proxy.hold()
	NewStore(through).storeBatch(ctx, []*pending{p}, 300*time.Millisecond)
	require.ErrorIs(t, p.err, context.DeadlineExceeded, "the INSERT waited past its bound")
	require.NoError(t, other.Rollback(ctx)) // the key is free: a live INSERT would now store p
	require.Eventually(t, func() bool {
		var running int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE state = 'active' AND query LIKE '%INSERT INTO requests%' AND pid <> pg_backend_pid()`).Scan(&running))
		return running == 0
	}, 10*time.Second, 10*time.Millisecond)
	proxy.open()
	got, err := NewStore(pool).Get(ctx, p.id)
	require.NoError(t, err)
	require.Equal(t, TypeNotStored, got.Type, "a write answered as failed is not stored")
	require.Equal(t, domain.CodeNotStored, got.Problem.Code, "its id reads as not stored")
}

// heldProxy forwards TCP connections to a Postgres server; while held, the
// connections it accepts wait before they are forwarded.
type heldProxy struct {
	host string
	port uint16
	mu   sync.Mutex
	gate chan struct{} // new connections wait for it (hold, open)
	send chan struct{} // what clients send waits for it (pauseSending, resumeSending)
}

func newHeldProxy(t *testing.T, to *pgx.ConnConfig) *heldProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	addr := ln.Addr().(*net.TCPAddr)
	p := &heldProxy{host: addr.IP.String(), port: uint16(addr.Port)}
	target := net.JoinHostPort(to.Host, strconv.Itoa(int(to.Port)))
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			gate := p.gate
			p.mu.Unlock()
			go func() {
				defer c.Close()
				if gate != nil {
					<-gate
				}
				s, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer s.Close()
				go func() { p.forward(s, c); _ = s.Close() }()
				_, _ = io.Copy(c, s)
			}()
		}
	}()
	return p
}

func (p *heldProxy) hold() { p.mu.Lock(); p.gate = make(chan struct{}); p.mu.Unlock() }

// forward copies what a client sends to the server, each read held while
// sending is paused.
func (p *heldProxy) forward(server io.Writer, client io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			p.mu.Lock()
			paused := p.send
			p.mu.Unlock()
			if paused != nil {
				<-paused
			}
			if _, werr := server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *heldProxy) pauseSending() { p.mu.Lock(); p.send = make(chan struct{}); p.mu.Unlock() }

func (p *heldProxy) resumeSending() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.send != nil {
		close(p.send)
		p.send = nil
	}
}

func (p *heldProxy) open() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
}

// A caller waits for its batch no longer than its context: one that gives
// up while its submission waits behind a batch in flight is told it was
// never sent, and the batch after leaves it out, so it is never stored;
// one that gives up while its own batch's INSERT runs is told its fate is
// unknown (Unsettled, with its id), and the INSERT goes on. Control: a
// caller queued the same way that does not give up is stored by that same
// next batch, so the next batch would have taken the one that gave up.
func TestGroupCommitCallersGiveUpAtTheirDeadline(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	g := &groupCommit{store: NewStore(pool), timeout: time.Minute, turns: storage.Turns[*pending]{Max: maxBatch},
		post: func(_ context.Context, rs []*Request) ([]Posting, error) { return make([]Posting, len(rs)), nil }}
	ctx := context.Background()
	lock, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	_, err = lock.Exec(ctx, `LOCK TABLE requests IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	type answer struct {
		posted bool
		err    error
	}
	start := func(p *pending, ctx context.Context) <-chan answer {
		out := make(chan answer, 1)
		go func() {
			posted, _, err := g.insert(ctx, p)
			out <- answer{posted, err}
		}()
		return out
	}
	subs := pendingBatch(t, 3, `{}`)
	inFlight, queued, control := subs[0], subs[1], subs[2]
	inFlightCtx, giveUpInFlight := context.WithCancel(ctx)
	inFlightAnswer := start(inFlight, inFlightCtx)
	require.Eventually(t, func() bool { // its INSERT waits on the lock
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO requests%'`).Scan(&n))
		return n == 1
	}, 30*time.Second, 10*time.Millisecond)
	queuedCtx, giveUpQueued := context.WithCancel(ctx)
	queuedAnswer := start(queued, queuedCtx)
	controlAnswer := start(control, ctx)

	giveUpQueued()
	a := <-queuedAnswer
	require.False(t, a.posted)
	require.ErrorIs(t, a.err, errNotSent, "never sent: certain")
	var unsettled *Unsettled
	require.NotErrorAs(t, a.err, &unsettled)
	giveUpInFlight()
	a = <-inFlightAnswer
	require.False(t, a.posted)
	require.ErrorAs(t, a.err, &unsettled, "sent, not answered: its fate is unknown to the caller")
	require.Equal(t, inFlight.id, unsettled.ID)

	require.NoError(t, lock.Rollback(ctx))
	a = <-controlAnswer
	require.True(t, a.posted)
	require.NoError(t, control.err)
	stored := func(id uuid.UUID) bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM requests WHERE id = $1`, id).Scan(&n))
		return n == 1
	}
	require.True(t, stored(control.id), "control: the batch after took the caller that waited")
	require.True(t, stored(inFlight.id), "the INSERT went on without its caller")
	require.False(t, stored(queued.id), "told it was never sent, and never stored")
}
