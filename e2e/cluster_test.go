package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/probe"
	"github.com/holdfast/holdfast/stays"
)

// TestRedisCluster runs holdfast on a private three-master Redis Cluster (SPEC
// §8): the API, an in-process worker and a worker process, all configured by
// REDIS_CLUSTER_ADDRS. A script or MULTI whose keys left their hash slot
// would fail here with CROSSSLOT; the control shows that the cluster does
// refuse such a script, and the spread check that holdfast's keys really sit
// on more than one master, so a cross-slot bug could not hide on one node.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	start := time.Now()
	addrs, cc := testenv.RedisCluster(t)
	t.Logf("cluster of %v up in %s", addrs, time.Since(start).Round(time.Millisecond))
	ctx := context.Background()

	// masterOf is the address of the master that serves key's slot.
	masterOf := func(t *testing.T, key string) string {
		n, err := cc.MasterForKey(ctx, key)
		require.NoError(t, err)
		return n.Options().Addr
	}

	t.Run("slot function agrees with CLUSTER KEYSLOT", func(t *testing.T) {
		// The unit tests of the key layouts (keyed, stays, events) use
		// testenv.HashSlot; it must be the cluster's own function.
		keys := []string{"plain", "hf:{probe:a}:mbox", "hf:{probe:{x}}:lease", "hf:{}:x", "{}", "a{b}c{d}", "{probe:}",
			keyed.LeaseKey(stays.SerialKey(7)), keyed.LeaseKey(events.QueueKey(3)), "asynq:{stays}:pending", "ünï{cödé}"}
		for i := range 200 {
			keys = append(keys, fmt.Sprintf("k%d", i), keyed.LeaseKey(probe.SerialKey(fmt.Sprint(i))))
		}
		for _, k := range keys {
			slot, err := cc.ClusterKeySlot(ctx, k).Result()
			require.NoError(t, err)
			require.Equal(t, int(slot), testenv.HashSlot(k), k)
		}
	})

	t.Run("control: a cross-slot script and MULTI are refused", func(t *testing.T) {
		a, b := keyed.LeaseKey(probe.SerialKey("a")), keyed.LeaseKey(probe.SerialKey("b"))
		require.NotEqual(t, testenv.HashSlot(a), testenv.HashSlot(b))
		both := redis.NewScript(`redis.call('SET', KEYS[1], 'x'); redis.call('SET', KEYS[2], 'x'); return 1`)
		err := both.Run(ctx, cc, []string{a, b}).Err()
		require.ErrorContains(t, err, "CROSSSLOT", "the cluster itself refuses a script over two slots")
		tx := cc.TxPipeline()
		tx.Set(ctx, a, "x", time.Second)
		tx.Set(ctx, b, "x", time.Second)
		_, err = tx.Exec(ctx)
		require.ErrorContains(t, err, "CROSSSLOT", "a MULTI over two slots is refused, not split")
		// The same script over one key's tagged keys runs.
		fence := keyed.KeyTag(probe.SerialKey("a")) + ":control"
		require.NoError(t, both.Run(ctx, cc, []string{a, fence}).Err())
		require.NoError(t, cc.Del(ctx, a).Err())
		require.NoError(t, cc.Del(ctx, fence).Err())
	})

	s := systest.Start(t, systest.Options{Redis: config.Redis{ClusterAddrs: addrs}, Workers: 1})
	s.StartWorkerProcess("cluster-proc")
	// Both workers, the one in process and the one configured only by its
	// environment, heartbeat to Asynq through the cluster (each runs an
	// Asynq server per queue).
	insp := asynq.NewInspectorFromRedisClient(s.Redis)
	require.Eventually(t, func() bool {
		servers, err := insp.Servers()
		pids := map[int]bool{}
		for _, srv := range servers {
			pids[srv.PID] = true
		}
		return err == nil && len(pids) == 2
	}, 30*time.Second, 50*time.Millisecond, "both workers' Asynq servers on the cluster")

	t.Run("pipeline: single- and multi-key probe writes", func(t *testing.T) {
		// a, b and d live on three different masters, so the multi-key
		// requests take leases on different nodes.
		owners := map[string]bool{}
		for _, k := range []string{"a", "b", "d"} {
			owners[masterOf(t, keyed.LeaseKey(probe.SerialKey(k)))] = true
		}
		require.Len(t, owners, 3, "the probe keys should span all three masters")
		keySets := [][]string{{"a"}, {"b"}, {"c"}, {"d"}, {"e"}, {"h"}, {"a", "b"}, {"b", "a", "d"}, {"d", "e"}}
		const n = 180
		ids := submitMany(t, s, 6, n, func(i int) probe.Payload {
			return probe.Payload{Keys: keySets[i%len(keySets)], SleepMs: 1}
		})
		require.Len(t, ids, n)
		took := s.WaitAllTerminal(90 * time.Second)
		t.Logf("%d probe writes terminal %s after the last was accepted", n, took.Round(time.Millisecond))
		require.Equal(t, map[domain.Status]int{domain.StatusSucceeded: n}, s.Statuses())
		rows, err := s.Pool.Query(ctx, `SELECT worker || ': ' || count(*) FROM probe_log GROUP BY worker ORDER BY worker`)
		require.NoError(t, err)
		byWorker, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		t.Logf("applications by worker: %v", byWorker)
		for _, k := range []string{"a", "b", "c", "d", "e", "h"} {
			r := s.Probe(k)
			require.Empty(t, r.Violations(), "key %s: %+v", k, r)
			require.Equal(t, int64(r.Succeeded), r.Counter)
		}
		// Per 9 requests: a in 3 of them, b in 3, d in 3.
		require.Equal(t, int64(n/9*3), s.Probe("a").Counter)
		require.Equal(t, int64(n/9*3), s.Probe("d").Counter)
	})

	t.Run("stays: holds, confirm, cancel, availability", func(t *testing.T) {
		staff := s.Client("staff", domain.RoleStaff)
		hotel := availCreate(t, staff, "/api/v1/hotels", map[string]string{"name": "Cluster", "timezone": "Asia/Seoul", "currency": "KRW"}, "hotelId")
		var types []int64
		for _, name := range []string{"Deluxe", "Suite"} {
			rt := availCreate(t, staff, fmt.Sprintf("/api/v1/hotels/%d/room-types", hotel), map[string]string{"name": name}, "roomTypeId")
			types = append(types, rt)
			for i := range 2 {
				availCreate(t, staff, fmt.Sprintf("/api/v1/hotels/%d/rooms", hotel),
					map[string]any{"roomTypeId": rt, "number": fmt.Sprintf("%s-%d", name, i)}, "roomId")
			}
		}
		in, out := stayDates(2)
		alice := holdClient{s.Client("alice", domain.RoleUser), t}
		bob := holdClient{s.Client("bob", domain.RoleUser), t}
		h1 := hold(t, alice.create(types[0], in, out, uuid.NewString()))
		h2 := hold(t, bob.create(types[1], in, out, uuid.NewString()))
		h3 := hold(t, bob.create(types[0], in, out, uuid.NewString()))
		require.Equal(t, []int64{2, 2}, heldCounts(t, s, types[0], in, out))
		require.Equal(t, []int64{1, 1}, heldCounts(t, s, types[1], in, out))

		// The hotel's availability reads both room types' counts (two
		// slots) in one pipeline, which the cluster client splits by node.
		var got stays.HotelAvailability
		availGet(t, staff, fmt.Sprintf("/api/v1/hotels/%d/availability?from=%s&to=%s", hotel, in, out), http.StatusOK, &got)
		require.Len(t, got.Items, 4)
		for _, it := range got.Items {
			want := map[int64]int64{types[0]: 2, types[1]: 1}[it.RoomTypeID]
			require.Equal(t, want, it.HeldRooms, "%+v", it)
			require.Equal(t, 2-want, it.AvailableRooms, "%+v", it)
		}

		v := alice.write("POST", "/api/v1/holds/"+h1.HoldID+"/confirm")
		require.Equal(t, domain.StatusSucceeded, v.Status, "%+v", v.Error)
		v = bob.write("DELETE", "/api/v1/holds/"+h2.HoldID)
		require.Equal(t, domain.StatusSucceeded, v.Status, "%+v", v.Error)
		require.Eventually(t, func() bool { // removal runs after the commit
			return fmt.Sprint(heldCounts(t, s, types[0], in, out), heldCounts(t, s, types[1], in, out)) == "[1 1] [0 0]"
		}, 5*time.Second, 20*time.Millisecond)
		availGet(t, staff, fmt.Sprintf("/api/v1/hotels/%d/availability?from=%s&to=%s", hotel, in, out), http.StatusOK, &got)
		for _, it := range got.Items {
			if it.RoomTypeID == types[0] {
				require.Equal(t, []int64{1, 1, 0}, []int64{it.UnavailableRooms, it.HeldRooms, it.AvailableRooms}, "%+v", it)
			} else {
				require.Equal(t, []int64{0, 0, 2}, []int64{it.UnavailableRooms, it.HeldRooms, it.AvailableRooms}, "%+v", it)
			}
		}
		require.Equal(t, http.StatusOK, bob.Do("GET", "/api/v1/holds/"+h3.HoldID, nil).Status)
	})

	t.Run("shop: cart, reserve, confirm", func(t *testing.T) {
		opts := newProduct(t, s, 5, 3)
		u := newShopper(t, s, "cluster-shopper")
		u.put(opts[0], 2)
		u.put(opts[1], 1)
		res := u.order("POST", "/api/v1/orders/reserve")
		require.Equal(t, domain.StatusSucceeded, res.Status, "%+v", res.Error)
		require.Equal(t, 3, stockOf(t, u.Client, opts[0]).AvailableStock)
		o := u.order("POST", "/api/v1/orders")
		require.Equal(t, domain.StatusSucceeded, o.Status, "%+v", o.Error)
		st := stockOf(t, u.Client, opts[0])
		require.Equal(t, []int{3, 0, 3}, []int{st.StockQuantity, st.ReservedQuantity, st.AvailableStock})
		require.Equal(t, 2, stockOf(t, u.Client, opts[1]).StockQuantity)
	})

	t.Run("events: FCFS seats, waiting room, token, booking, leave", func(t *testing.T) {
		e := newEvent(t, s, map[string]any{"name": "Cluster gig", "seatCount": 2})
		seats, soldOut := fcfsRush(t, s, e.EventID, 4, func(int) map[string]string { return nil })
		require.Len(t, seats, 2)
		require.Equal(t, 2, soldOut)
		require.Eventually(t, func() bool { return publicEvent(t, s, e.EventID).RemainingSeats == 0 }, 5*time.Second, 20*time.Millisecond)

		room := newEvent(t, s, map[string]any{"name": "Cluster room", "seats": []string{"A", "B"}, "maxConcurrent": 1, "tokenTtlSeconds": 30})
		users := queueUsers(t, s, room.EventID, 3)
		base := fmt.Sprintf("/api/v1/events/%d", room.EventID)
		var tok struct{ EntryToken string }
		r := users[0].Do("POST", base+"/queue/token", nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		r.JSON(t, &tok)
		require.Equal(t, domain.CodeNotYourTurn, users[1].Do("POST", base+"/queue/token", nil).ErrorCode(t))
		var free struct{ Items []events.Seat }
		users[0].Do("GET", base+"/seats?status=available", nil).JSON(t, &free)
		require.Len(t, free.Items, 2)
		r = users[0].Do("POST", fmt.Sprintf("%s/seats/%d/reservation", base, free.Items[0].SeatID), nil, events.EntryTokenHeader, tok.EntryToken)
		require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
		var a systest.Accepted
		r.JSON(t, &a)
		v := users[0].Wait(a.RequestID, 30*time.Second)
		require.Equal(t, domain.StatusSucceeded, v.Status, "%+v", v.Error)
		// The booking gave the slot back: the second gets in, then leaves
		// (Leave's MULTI), and the third gets in.
		require.Eventually(t, func() bool { return users[1].Do("POST", base+"/queue/token", nil).Status == http.StatusOK },
			10*time.Second, 50*time.Millisecond)
		require.Equal(t, http.StatusOK, users[1].Do("DELETE", base+"/queue/token", nil).Status)
		r = users[2].Do("POST", base+"/queue/token", nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	})

	t.Run("asynqmon reads the cluster", func(t *testing.T) {
		r := s.Client("root", domain.RoleAdmin).Do("GET", "/monitoring/api/queues", nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		for _, q := range []string{"probe", "stays", "shop", "events"} {
			require.Contains(t, string(r.Body), `"`+q+`"`)
		}
	})

	t.Run("keys spread over every master", func(t *testing.T) {
		// holdfast's own keys (mailboxes, leases, fences, holds, rooms) and
		// Asynq's ({queue}-tagged) are on several nodes: a script that
		// mixed two of them would have met a CROSSSLOT above.
		var mu sync.Mutex
		perMaster := map[string]map[string]int{}
		require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			counts := map[string]int{}
			iter := node.Scan(ctx, 0, "*", 1000).Iterator()
			for iter.Next(ctx) {
				counts[strings.SplitN(iter.Val(), ":", 2)[0]]++
			}
			mu.Lock()
			perMaster[node.Options().Addr] = counts
			mu.Unlock()
			return iter.Err()
		}))
		t.Logf("keys per master by prefix: %v", perMaster)
		withOwn := 0
		for _, counts := range perMaster {
			if counts["hf"] > 0 {
				withOwn++
			}
		}
		require.Len(t, perMaster, 3)
		require.Equal(t, 3, withOwn, "holdfast's keys should live on every master")
	})
}

// TestRedisSentinel runs holdfast through a Sentinel (REDIS_SENTINEL_ADDRS,
// REDIS_SENTINEL_MASTER): the API and a worker process find the primary by
// asking the Sentinel, a write reaches its terminal state, Asynqmon reads the
// queues, and the keys are on the primary the Sentinel names.
func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	rc := testenv.RedisSentinel(t, "holdfast")
	s := systest.Start(t, systest.Options{Redis: rc})
	s.StartWorkerProcess("sentinel-proc")
	c := s.Client("sentinel", domain.RoleUser)
	v := c.Wait(c.Probe(probe.Payload{Keys: []string{"a", "b"}}), 30*time.Second)
	require.Equal(t, domain.StatusSucceeded, v.Status, "%+v", v.Error)
	r := s.Client("root", domain.RoleAdmin).Do("GET", "/monitoring/api/queues", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Contains(t, string(r.Body), `"probe"`)

	ctx := context.Background()
	sc := redis.NewSentinelClient(&redis.Options{Addr: rc.SentinelAddrs[0]})
	defer sc.Close()
	addr, err := sc.GetMasterAddrByName(ctx, rc.SentinelMaster).Result()
	require.NoError(t, err)
	primary := redis.NewClient(&redis.Options{Addr: addr[0] + ":" + addr[1]})
	defer primary.Close()
	for _, k := range []string{"a", "b"} {
		keys, err := primary.Keys(ctx, keyed.KeyTag(probe.SerialKey(k))+":*").Result()
		require.NoError(t, err)
		require.NotEmpty(t, keys, "key %s's lease state is on the primary", k)
	}
}
