package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/cmd/wiring"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/probe"
	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/tasks"
)

func TestRequestLifecycle(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1})
	alice := s.Client("alice", domain.RoleUser)

	id := alice.Probe(probe.Payload{Keys: []string{"life"}, Limit: 1})
	v := alice.Wait(id, 20*time.Second)
	require.Equal(t, domain.StatusSucceeded, v.Status)
	require.Equal(t, "probe.incr", v.Type)
	require.JSONEq(t, `{"values":{"life":1}}`, string(v.Result))
	require.NotNil(t, v.CompletedAt)
	require.Nil(t, v.Error)

	// A business "no" is rejected with the synchronous error and its status.
	id = alice.Probe(probe.Payload{Keys: []string{"life"}, Limit: 1})
	v = alice.Wait(id, 20*time.Second)
	require.Equal(t, domain.StatusRejected, v.Status)
	require.Equal(t, probe.CodeLimitReached, v.Error.Code)
	require.Equal(t, http.StatusConflict, v.Error.HTTPStatus)

	// A request that keeps failing ends failed (INTERNAL), and does not block
	// the requests behind it on the same key.
	bad := alice.Probe(probe.Payload{Keys: []string{"life2"}, Poison: true})
	good := alice.Probe(probe.Payload{Keys: []string{"life2"}})
	v = alice.Wait(bad, 30*time.Second)
	require.Equal(t, domain.StatusFailed, v.Status)
	require.Equal(t, domain.CodeInternal, v.Error.Code)
	require.Equal(t, domain.StatusSucceeded, alice.Wait(good, 30*time.Second).Status)

	// Only the owner and staff see a request; others get 404 as for no request.
	bob := s.Client("bob", domain.RoleUser)
	r := bob.Do("GET", "/api/v1/requests/"+id, nil)
	require.Equal(t, http.StatusNotFound, r.Status)
	require.Equal(t, domain.CodeNotFound, r.ErrorCode(t))
	// Also when a long poll finds the request among those this API accepted.
	fresh := alice.Probe(probe.Payload{Keys: []string{"life3"}})
	r = bob.Do("GET", "/api/v1/requests/"+fresh+"?wait=1s", nil)
	require.Equal(t, http.StatusNotFound, r.Status)
	require.Equal(t, domain.CodeNotFound, r.ErrorCode(t))
	staff := s.Client("st", domain.RoleStaff)
	require.Equal(t, http.StatusOK, staff.Do("GET", "/api/v1/requests/"+id, nil).Status)
	require.Equal(t, http.StatusNotFound, alice.Do("GET", "/api/v1/requests/00000000-0000-0000-0000-000000000000", nil).Status)
	require.Equal(t, http.StatusNotFound, alice.Do("GET", "/api/v1/requests/not-a-uuid", nil).Status)

	// A request being applied shows as processing, with no outcome yet.
	slow := alice.Probe(probe.Payload{Keys: []string{"slow"}, SleepMs: 1000})
	require.Eventually(t, func() bool {
		var v requests.View
		alice.Do("GET", "/api/v1/requests/"+slow, nil).JSON(t, &v)
		require.Nil(t, v.Error)
		return v.Status == domain.StatusProcessing && string(v.Result) == "null" && v.CompletedAt == nil
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, domain.StatusSucceeded, alice.Wait(slow, 20*time.Second).Status)

	// ?wait is bounded and validated.
	require.Equal(t, http.StatusBadRequest, alice.Do("GET", "/api/v1/requests/"+id+"?wait=31s", nil).Status)
	require.Equal(t, http.StatusBadRequest, alice.Do("GET", "/api/v1/requests/"+id+"?wait=soon", nil).Status)
	require.Equal(t, http.StatusOK, alice.Do("GET", "/api/v1/requests/"+id+"?wait=2", nil).Status)
}

// A long-poll returns as soon as the request is terminal, not at its deadline.
func TestLongPollWakesOnOutcome(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{})
	c := s.Client("carol", domain.RoleUser)
	id := c.Probe(probe.Payload{Keys: []string{"lp"}})

	type answer struct {
		r     systest.Response
		spent time.Duration
	}
	got := make(chan answer, 1)
	go func() {
		start := time.Now()
		r, _ := c.TryDo("GET", "/api/v1/requests/"+id+"?wait=20s", nil)
		got <- answer{r, time.Since(start)}
	}()
	// The poll must be parked in the server before any worker exists, and
	// nothing observable says it is.
	time.Sleep(300 * time.Millisecond)
	s.StartWorker("late")
	a := <-got
	require.Equal(t, http.StatusOK, a.r.Status)
	require.Contains(t, string(a.r.Body), `"status":"succeeded"`)
	require.Less(t, a.spent, 15*time.Second, "long-poll ran to its deadline instead of waking")

	// The woken poll answers with the view the worker announced, which is
	// what Postgres stored, byte for byte.
	stored := c.Do("GET", "/api/v1/requests/"+id, nil)
	require.Equal(t, http.StatusOK, stored.Status)
	require.Equal(t, string(stored.Body), string(a.r.Body))
}

// A long poll that comes after its request was announced, with no poll
// waiting then, is answered by the API that accepted the request with the
// view the announcement carried, without reading Postgres: once the row is
// changed behind the API's back, a plain GET shows the change and that long
// poll does not. The view is handed out once, to its owner; a later long
// poll reads Postgres. Another user gets 404 there as anywhere, and leaves
// the view where it was.
func TestLongPollAfterTheAnnouncementAnswersFromTheAPI(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1, Overrides: []string{"ANNOUNCED_VIEWS", "true"}})
	c := s.Client("dana", domain.RoleUser)
	id := c.Probe(probe.Payload{Keys: []string{"kept"}})
	path := "/api/v1/requests/" + id

	var stored systest.Response
	require.Eventually(t, func() bool {
		stored = c.Do("GET", path, nil)
		return strings.Contains(string(stored.Body), `"status":"succeeded"`)
	}, 20*time.Second, 10*time.Millisecond)
	// The announcement reaches the API by Redis pub/sub, and nothing outside
	// the API says it has arrived.
	time.Sleep(300 * time.Millisecond)
	_, err := s.Pool.Exec(context.Background(), `UPDATE requests SET result = '{"values": {"kept": 99}}' WHERE id = $1`, id)
	require.NoError(t, err)
	require.Contains(t, string(c.Do("GET", path, nil).Body), `99`, "a plain GET reads Postgres")

	require.Equal(t, http.StatusNotFound, s.Client("mallory", domain.RoleUser).Do("GET", path+"?wait=1s", nil).Status)
	kept := c.Do("GET", path+"?wait=5s", nil)
	require.Equal(t, http.StatusOK, kept.Status)
	require.Equal(t, string(stored.Body), string(kept.Body), "answered with the announced view, which another user's poll left")
	require.Contains(t, string(c.Do("GET", path+"?wait=5s", nil).Body), `99`, "handed out once")
}

// With ANNOUNCED_VIEWS=false, a long poll never answers with an announced
// view: it reads Postgres before it waits, and again once an announcement
// wakes it. No worker runs, so the request stays queued; the announcement
// is a fake that says it succeeded. With the views on (the control), the
// poll answers with the fake.
func TestLongPollWithoutAnnouncedViewsReadsPostgres(t *testing.T) {
	t.Parallel()
	for _, views := range []bool{false, true} {
		t.Run(fmt.Sprintf("ANNOUNCED_VIEWS=%t", views), func(t *testing.T) {
			t.Parallel()
			s := systest.Start(t, systest.Options{Overrides: []string{"ANNOUNCED_VIEWS", fmt.Sprint(views)}})
			c := s.Client("dana", domain.RoleUser)
			id := c.Probe(probe.Payload{Keys: []string{"kept"}})
			fake := &requests.Request{ID: uuid.MustParse(id), Type: probe.TypeIncr, UserID: "dana",
				Status: domain.StatusSucceeded, Result: []byte(`{"values":{"kept":424242}}`)}
			msg, err := requests.DoneMessage([]*requests.Request{fake})
			require.NoError(t, err)

			answer := make(chan systest.Response, 1)
			go func() { answer <- c.Do("GET", "/api/v1/requests/"+id+"?wait=20s", nil) }()
			var got systest.Response
			tick := time.NewTicker(50 * time.Millisecond) // until the poll listens
			defer tick.Stop()
		announce:
			for {
				select {
				case got = <-answer:
					break announce
				case <-tick.C:
					require.NoError(t, s.Redis.Publish(context.Background(), requests.DoneChannel, msg).Err())
				}
			}
			require.Equal(t, http.StatusOK, got.Status)
			if views {
				require.Contains(t, string(got.Body), `424242`, "answered with the announced view")
			} else {
				require.Contains(t, string(got.Body), `"status":"queued"`, "woken, it read Postgres")
				require.NotContains(t, string(got.Body), `424242`)
			}
		})
	}
}

// A worker runs one Asynq server per queue, so fetching a task is one script
// call on its own queue rather than a probe of every queue in turn; each
// vertical's server has WORKER_CONCURRENCY slots, maintenance a quarter.
func TestWorkerRunsAnAsynqServerPerQueue(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1})
	insp := asynq.NewInspectorFromRedisClient(s.Redis)
	want := []string{"events", tasks.MaintenanceQueue, probe.Queue, "shop", "stays"}
	slices.Sort(want)
	var servers []*asynq.ServerInfo
	require.Eventually(t, func() bool {
		var err error
		servers, err = insp.Servers()
		return err == nil && len(servers) == len(want)
	}, 10*time.Second, 20*time.Millisecond)
	var got []string
	for _, srv := range servers {
		require.Len(t, srv.Queues, 1, "server %s serves one queue", srv.ID)
		for q := range srv.Queues {
			got = append(got, q)
			slots := s.Cfg.Concurrency
			if q == tasks.MaintenanceQueue {
				slots = max(1, slots/4)
			}
			require.Equal(t, slots, srv.Concurrency, "queue %s", q)
		}
	}
	slices.Sort(got)
	require.Equal(t, want, got)
}

// A binary told to stop while it is still starting (waiting on the
// migration lock behind another, say) stops cleanly: a test that ends
// before a worker it started is ready, or a deploy that stops a replica
// during its start, is no failure.
func TestStopWhileStartingIsClean(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{NoAPI: true})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, (&wiring.Worker{Config: s.Cfg, Log: s.Log, Name: "early"}).Run(ctx))
	require.NoError(t, (&wiring.API{Config: s.Cfg, Log: s.Log}).Run(ctx))
}
