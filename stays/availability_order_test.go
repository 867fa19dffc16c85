package stays

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/storage"
)

// betweenReads runs its batches once, right after an availability read's
// first Redis read (the script that reads the nights' live holds)
// returns and before the read goes to Postgres: the window in which a
// worker's batch can land between the two stores' reads.
type betweenReads struct {
	mu      sync.Mutex
	reads   int        // live-hold reads seen
	seen    [][]string // the ids of each night the first read returned
	batches func()
}

func (*betweenReads) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*betweenReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (b *betweenReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		var nights [][]string
		for _, c := range cmds {
			args := c.Args()
			if c.Name() != "eval" || len(args) < 4 || !strings.HasSuffix(fmt.Sprint(args[3]), ":v") {
				continue // not the live holds' script, whose first key is the batch counter
			}
			vals, _ := c.(*redis.Cmd).Slice()
			for _, v := range vals[1:] {
				var ids []string
				for _, m := range v.([]any) {
					ids = append(ids, fmt.Sprint(m))
				}
				nights = append(nights, ids)
			}
		}
		if nights == nil {
			return err
		}
		b.mu.Lock()
		b.reads++
		first := b.reads == 1
		if first {
			b.seen = nights
		}
		b.mu.Unlock()
		if first {
			b.batches()
		}
		return err
	}
}

// orderRig is a hold rig of two rooms and an availability reader on its
// own Redis client, with hook between its Redis and Postgres reads.
func orderRig(t *testing.T, hook *betweenReads) (*holdRig, *Availability, AvailabilityQuery) {
	t.Helper()
	_, pool := testenv.Postgres(t)
	url, rdb := testenv.Redis(t)
	g := newHoldRig(t, pool, rdb, 2, true)
	reader, err := storage.OpenRedis(context.Background(), config.Redis{URL: url})
	require.NoError(t, err)
	t.Cleanup(func() { _ = reader.Close() })
	reader.AddHook(hook)
	var hotelID int64
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT hotel_id FROM room_types WHERE id = $1`, g.rt).Scan(&hotelID))
	r, err := domain.ParseDateRange("2030-03-01", "2030-03-02")
	require.NoError(t, err)
	return g, NewAvailability(pool, NewHoldStore(reader)), AvailabilityQuery{HotelID: hotelID, RoomTypeID: g.rt, Range: r}
}

// counts is a one-night answer as (reserved, held, available).
func counts(t *testing.T, av HotelAvailability) [3]int64 {
	t.Helper()
	require.Len(t, av.Items, 1)
	it := av.Items[0]
	return [3]int64{it.UnavailableRooms, it.HeldRooms, it.AvailableRooms}
}

// A confirm whose hold was not removed after its stay committed (a worker
// that crashed in between: the hold lapses at its expiry) counts once, as
// reserved: the hold has a stay. Control: the hold is still live in Redis,
// so adding the two counts would book one room twice.
func TestAvailabilityCountsAConfirmedHoldOnce(t *testing.T) {
	t.Parallel()
	hook := &betweenReads{batches: func() {}}
	g, av, q := orderRig(t, hook)
	first := g.create("alice", "2030-03-01", "2030-03-02")
	g.drain()
	alice := g.hold(first)
	var room int64
	require.NoError(t, g.pool.QueryRow(context.Background(), `SELECT id FROM rooms WHERE room_type_id = $1 LIMIT 1`, g.rt).Scan(&room))
	_, err := g.pool.Exec(context.Background(), `INSERT INTO stay_reservations
			(hotel_id, room_type_id, room_id, user_id, hold_id, check_in, check_out, status)
		VALUES ($1, $2, $3, 'alice', $4, '2030-03-01', '2030-03-02', 'Confirmed')`, q.HotelID, g.rt, room, alice.HoldID)
	require.NoError(t, err)

	out, err := av.Hotel(context.Background(), q, time.Now())
	require.NoError(t, err)
	require.Equal(t, [3]int64{1, 0, 1}, counts(t, out), "reserved, held, available")
	require.Equal(t, [][]string{{alice.HoldID}}, hook.seen, "control: the hold is live in Redis")
}

// One batch between the reads: bob's create and alice's confirm, applied
// together. A read that took the holds from before the batch and the stays
// from after it would show alice's stay without bob's hold, while another
// reader, between the batch's hold writes and its commit, sees bob's hold
// without alice's stay: no order explains both. So the read, seeing the
// room type's batch counter move, reads again, and the answer has both.
// Control: the first try's holds were from before the batch, and
// Postgres' snapshot had the batch's stay.
func TestAvailabilityReadAcrossABatchReadsAgain(t *testing.T) {
	t.Parallel()
	hook := &betweenReads{}
	g, av, q := orderRig(t, hook)
	first := g.create("alice", "2030-03-01", "2030-03-02")
	g.drain()
	alice := g.hold(first)
	var bob, confirm uuid.UUID
	hook.batches = func() {
		bob = g.create("bob", "2030-03-01", "2030-03-02")
		confirm = g.accept(TypeHoldConfirm, "alice", HoldPayload{HoldID: alice.HoldID})
		g.drain()
	}

	out, err := av.Hotel(context.Background(), q, time.Now())
	require.NoError(t, err)
	require.Equal(t, [3]int64{1, 1, 0}, counts(t, out), "reserved, held, available")
	require.Equal(t, 2, hook.reads, "the read tried again")
	require.Equal(t, g.outcome(bob).CompletedAt, g.outcome(confirm).CompletedAt, "one batch applied both")
	require.Equal(t, [][]string{{alice.HoldID}}, hook.seen, "control: the first try missed bob's hold")
	var stays int
	require.NoError(t, g.pool.QueryRow(context.Background(), `SELECT count(*) FROM stay_reservations WHERE hold_id = $1`, alice.HoldID).Scan(&stays))
	require.Equal(t, 1, stays, "control: the stay was committed before the first try's snapshot")
}
