package requests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/storage"
)

// frozenRig is a store on a private Postgres server, reached through a
// proxy, whose pool's one connection has written a request before, so its
// INSERT is prepared: one sent while the server is frozen reaches the
// backend's socket whole and waits there (a cold connection would wait for
// its Parse's answer and send nothing more). direct reaches the server
// without the proxy.
type frozenRig struct {
	pg      *testenv.PGServer
	proxy   *heldProxy
	s       *Store
	direct  *Store
	backend int // of the store's connection
}

func newFrozenRig(t *testing.T) *frozenRig {
	t.Helper()
	ctx := context.Background()
	pg := testenv.PostgresServer(t)
	url, direct := testenv.PostgresOn(t, pg.URL)
	proxy := newHeldProxy(t, direct.Config().ConnConfig)
	pool, err := storage.OpenPostgres(ctx, url, 1, func(c *pgxpool.Config) {
		c.ConnConfig.Host, c.ConnConfig.Port = proxy.host, proxy.port
	})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	r := &frozenRig{pg: pg, proxy: proxy, s: NewStore(pool), direct: NewStore(direct)}
	_, err = r.s.insertMany(ctx, pendingBatch(t, 1, `{}`))
	require.NoError(t, err)
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&r.backend))
	return r
}

// freeze freezes the server, and holds up new connections to it: the
// cancel request pgx sends for a statement it gave up on among them, so
// that what was sent runs when the server thaws, as it does when a cancel
// request loses the race (it did, for a few of thousands, in a rush).
func (r *frozenRig) freeze() *testenv.Frozen {
	r.proxy.hold()
	return r.pg.Freeze()
}

// thaw thaws f, waits until the store's backend has run the INSERT sent to
// it, then lets connections through again.
func (r *frozenRig) thaw(t *testing.T, f *testenv.Frozen) {
	t.Helper()
	f.Thaw()
	require.Eventually(t, func() bool {
		var done bool
		require.NoError(t, r.direct.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE pid = $1 AND state = 'idle' AND query LIKE '%INSERT INTO requests%')`, r.backend).Scan(&done))
		return done
	}, 10*time.Second, 10*time.Millisecond)
	r.proxy.open()
}

// A write sent to a Postgres that froze (SIGSTOP of the postmaster and its
// backends) cannot be answered stored or not: its INSERT waits in a
// backend's socket and commits when the server wakes. It is answered
// Unsettled with its id, and a read of that id settles it for good (here:
// stored, to be applied; a tombstone first wins instead,
// TestAnInsertAnsweredAsFailedIsNotStoredAfterwards). Control: answered as
// a plain failure, as before, the write is stored once the server wakes —
// a client told "not stored" would own what it wrote.
func TestAWriteIntoAFrozenPostgresIsSettled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("settled", func(t *testing.T) {
		t.Parallel()
		r := newFrozenRig(t)
		p := pendingBatch(t, 1, `{}`)[0]
		f := r.freeze()
		r.s.storeBatch(ctx, []*pending{p}, 300*time.Millisecond)
		var u *Unsettled
		require.True(t, errors.As(p.err, &u), "answered %v", p.err)
		require.Equal(t, p.id, u.ID)
		r.thaw(t, f)

		require.NoError(t, r.direct.Settle(ctx, []uuid.UUID{p.id}, []string{"u"}))
		got, err := r.direct.Get(ctx, p.id)
		require.NoError(t, err)
		require.Equal(t, "t", got.Type, "the INSERT came first: stored")
		require.Equal(t, domain.StatusQueued, got.Status)
	})
	t.Run("control", func(t *testing.T) {
		t.Parallel()
		r := newFrozenRig(t)
		p := pendingBatch(t, 1, `{}`)[0]
		f := r.freeze()
		ictx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err := r.s.insertMany(ictx, []*pending{p}) // no settling: the answer is this error
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotErrorIs(t, err, errNotSent, "the INSERT was sent")
		r.thaw(t, f)
		got, err := r.direct.Get(ctx, p.id)
		require.NoError(t, err, "the write answered as failed was stored after all")
		require.Equal(t, "t", got.Type)
	})
}
