package e2e

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/bench/baseline"
	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/loadtest"
	"github.com/holdfast/holdfast/storage"
)

// envLoad turns on the load tool's runs against a real holdfast: they
// measure nothing holdfast promises that another test does not show, so
// make test skips them and make load-check runs them (HOLDFAST_LOAD=1).
const envLoad = "HOLDFAST_LOAD"

func skipUnlessLoad(t *testing.T) {
	t.Helper()
	if os.Getenv(envLoad) == "" {
		t.Skip("make load-check runs the load tool's scenarios (" + envLoad + "=1)")
	}
}

// runLoad runs scenario name against s and checks its report as
// runChecked does, and that the API's memory and the machine's CPU were read.
func runLoad(t *testing.T, s *systest.System, name string, opt loadtest.Options) *loadtest.Report {
	t.Helper()
	opt.BaseURL, opt.Secret = s.URL, s.Cfg.JWTSecret
	opt.MetricsURLs = map[string]string{"api": s.URL + "/metrics"}
	rep := runChecked(t, name, opt)
	require.Positive(t, rep.PeakRSSMiB["api"])
	require.Positive(t, rep.CPUSeconds[loadtest.CPUTotal])
	return rep
}

// runChecked runs scenario name and checks its report: every journey
// ended, the invariants hold, the server's CPU was read.
func runChecked(t *testing.T, name string, opt loadtest.Options) *loadtest.Report {
	t.Helper()
	rep, err := loadtest.Run(loadContext(t), name, opt)
	require.NoError(t, err)
	var text bytes.Buffer
	rep.WriteText(&text)
	t.Log(text.String())
	require.True(t, rep.OK, "violations: %v", rep.Violations)
	require.Empty(t, rep.Errors)
	require.Contains(t, rep.CPUSeconds, "api")
	return rep
}

// An open position stream counts as presence: 40 users of an event whose
// admission is paused hold their streams open past its presence timeout
// (5 s) and are all still waiting at the end (idle-streams checks each);
// TestPositionStream is the control, a user whose stream is closed losing
// its place. Fewer clients than streams would never open them all: refused.
func TestOpenStreamsKeepTheirPlace(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1, Overrides: []string{"RATE_LIMIT_PER_USER", "0"}})
	rep := runLoad(t, s, "idle-streams", loadtest.Options{Concurrency: 40, Users: 40, Duration: 8 * time.Second})
	r := rep.Streams
	require.Equal(t, 40, r.Streams)
	require.GreaterOrEqual(t, r.HoldSeconds, 8.0)
	require.Positive(t, r.APIRSSMiB)
	require.Contains(t, r.CPUPercent, "api")
	_, err := loadtest.Run(loadContext(t), "idle-streams", loadtest.Options{BaseURL: s.URL, Secret: s.Cfg.JWTSecret,
		Concurrency: 10, Users: 20})
	require.ErrorContains(t, err, "-concurrency", "fewer clients than streams would never open them all")
}

// TestLoadScenarios runs the load tool's scenarios, small, against a real
// API and worker, and checks each report: every journey ended, the
// invariants hold and the outcomes are the ones the scenario implies.
func TestLoadScenarios(t *testing.T) {
	skipUnlessLoad(t)
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 1, Rush: true, Overrides: []string{"RATE_LIMIT_PER_USER", "0"}})
	run := func(name string, opt loadtest.Options) *loadtest.Report {
		t.Helper()
		return runLoad(t, s, name, opt)
	}
	t.Run("fcfs-rush", func(t *testing.T) {
		rep := run("fcfs-rush", loadtest.Options{Concurrency: 20, Users: 120, Seats: 50, PreferWait: 10 * time.Second})
		require.Equal(t, 50, rep.Outcomes["fcfs succeeded"])
		require.Equal(t, 70, rep.Outcomes["fcfs rejected SOLD_OUT"])
		require.Equal(t, 120, rep.Accepted)
		require.Equal(t, 120, rep.AcceptToDone.Count)
	})
	t.Run("fcfs-rush intake", func(t *testing.T) {
		rep := run("fcfs-rush", loadtest.Options{Concurrency: 20, Users: 100, Seats: 100, Intake: true})
		require.Equal(t, 100, rep.Outcomes["fcfs succeeded"])
		require.Positive(t, rep.SubmitCPUSeconds[loadtest.CPUTotal], "the CPU until the last 202")
		require.LessOrEqual(t, rep.SubmitCPUSeconds[loadtest.CPULoadTool], rep.CPUSeconds[loadtest.CPULoadTool])
		require.Nil(t, rep.Applying, "the queues are not watched without -redis")
	})
	t.Run("fcfs-rush intake, applying held", func(t *testing.T) {
		// The runs before may leave a task to finish (a request's own task
		// re-driven after its drain applied it, as when a write's dispatch
		// ran out of its caller's time): none may count as this run's.
		insp := asynq.NewInspectorFromRedisClient(s.Redis)
		require.Eventually(t, func() bool {
			info, err := insp.GetQueueInfo(events.Queue)
			return err == nil && info.Pending+info.Active+info.Scheduled+info.Retry+info.Aggregating == 0
		}, time.Minute, 50*time.Millisecond, "the runs before are over")
		rep := run("fcfs-rush", loadtest.Options{Concurrency: 20, Users: 100, Seats: 60, Intake: true,
			RedisURL: s.Cfg.Redis.URL, HoldApply: true})
		require.Equal(t, 60, rep.Outcomes["fcfs succeeded"])
		require.Equal(t, 40, rep.Outcomes["fcfs rejected SOLD_OUT"])
		require.Equal(t, &loadtest.Applying{Held: true}, rep.Applying, "nothing processed while the clients submitted")
		info, err := asynq.NewInspectorFromRedisClient(s.Redis).GetQueueInfo(events.Queue)
		require.NoError(t, err)
		require.False(t, info.Paused, "the run resumed the queue")
		_, err = loadtest.Run(loadContext(t), "fcfs-rush", loadtest.Options{BaseURL: s.URL, Secret: s.Cfg.JWTSecret,
			Users: 10, RedisURL: s.Cfg.Redis.URL, HoldApply: true})
		require.ErrorContains(t, err, "needs an intake run", "holding the workers back while clients wait for outcomes would never end")
	})
	t.Run("hold-storm", func(t *testing.T) {
		rep := run("hold-storm", loadtest.Options{Concurrency: 20, Users: 150, PreferWait: 10 * time.Second})
		require.Equal(t, 150, rep.Outcomes["hold.create succeeded"]+rep.Outcomes["hold.create rejected NOT_AVAILABLE"])
		require.Positive(t, rep.Outcomes["hold.confirm succeeded"])
	})
	t.Run("cart-checkout, twice", func(t *testing.T) {
		// Each run creates options of its own (their codes are unique), so a
		// second run against the same system is a run like the first.
		for range 2 {
			rep := run("cart-checkout", loadtest.Options{Concurrency: 10, Users: 40})
			require.Equal(t, 40, rep.Outcomes["order.reserve succeeded"]+rep.Outcomes["order.reserve rejected INSUFFICIENT_AVAILABLE_STOCK"])
			require.Positive(t, rep.Outcomes["order.confirm succeeded"])
		}
	})
	t.Run("cart-rush, twice", func(t *testing.T) {
		// Once with each write's outcome in its answer (Prefer: wait), once
		// submitted and then polled.
		for seed := range uint64(2) {
			rep := run("cart-rush", loadtest.Options{Concurrency: 30, Users: 150, Stock: 15, Seed: seed, PreferWait: time.Duration(1-seed) * 10 * time.Second})
			requireCartRush(t, rep, "order.reserve", 150, 15)
			require.Equal(t, 150, rep.AcceptToDone.Count, "every reserve followed to its outcome")
		}
	})
	t.Run("baseline-cart, twice", func(t *testing.T) {
		url, dbURL := startCartBaseline(t)
		for seed := range uint64(2) { // the same tables twice: each run has options of its own
			rep := runChecked(t, "baseline-cart", loadtest.Options{BaseURL: url, DatabaseURL: dbURL,
				Concurrency: 30, Users: 150, Stock: 15, Seed: seed, MetricsURLs: map[string]string{"api": url + "/metrics"}})
			requireCartRush(t, rep, "order.reserve.sync", 150, 15)
			require.Equal(t, 150, rep.ClientRoundTrip.Count)
		}
	})
	t.Run("availability-read", func(t *testing.T) {
		rep := run("availability-read", loadtest.Options{Concurrency: 8, Users: 80})
		require.Equal(t, 80, rep.Reads.Count)
	})
}

// requireCartRush checks a cart rush's report: every cart reserved or
// refused for stock, as the outcomes say; nothing oversold, no duplicate,
// the server holding exactly what the clients were told; and, since about
// three times the stock is asked for, refusals, and as many units reserved
// as the stock allows give or take what carts of two lines leave.
func requireCartRush(t *testing.T, rep *loadtest.Report, kind string, users, stock int) {
	t.Helper()
	c := rep.Cart
	require.NotNil(t, c)
	require.Equal(t, users, c.Carts)
	require.Equal(t, users, c.CartsReserved+c.CartsRefused)
	require.Equal(t, c.CartsReserved, rep.Outcomes[kind+" succeeded"])
	require.Equal(t, c.CartsRefused, rep.Outcomes[kind+" rejected INSUFFICIENT_AVAILABLE_STOCK"])
	require.Zero(t, c.OversoldUnits)
	require.Zero(t, c.Duplicates)
	require.Equal(t, c.UnitsTold, c.UnitsReserved)
	require.Positive(t, c.CartsRefused)
	require.Greater(t, c.UnitsAsked, 2*5*stock)
	require.LessOrEqual(t, c.UnitsReserved, 5*stock)
	require.Greater(t, c.UnitsReserved, 5*stock*3/4)
}

// startCartBaseline serves cmd/baseline's cart mode, its tables in an
// empty schema of its own, until the test ends, and returns its URL and
// the database URL whose search_path selects the schema, where the
// scenario writes its options.
func startCartBaseline(t *testing.T) (string, string) {
	t.Helper()
	ctx := context.Background()
	dbURL := testenv.EmptySchemaOn(t, testenv.PGServerURL())
	pool, err := storage.OpenPostgres(ctx, dbURL, 20) // the clients race in Postgres, not for a connection
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var schema string
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema))
	require.NoError(t, baseline.Setup(ctx, pool, baseline.Cart, schema, 0))
	srv, err := baseline.New(pool, baseline.Options{Mode: baseline.Cart, Schema: schema, ShutdownTimeout: 2 * time.Second})
	require.NoError(t, err)
	return testenv.Serve(t, srv.Serve), dbURL
}

// TestLoadSoak runs the soak scenario briefly against a real API and worker
// (3 s at 50 writes/s, a sample a second, 1 s idle) and checks its samples
// are real: both processes' memory, Redis' keys and the requests table's
// rows read at every sample, and the distinct keys are the writes. Its
// checks' verdicts are not asserted: a run this short in one process under
// the race detector says nothing about memory growth (the arithmetic is
// loadtest's TestSoakChecks*); only that any violation is a soak check.
func TestLoadSoak(t *testing.T) {
	skipUnlessLoad(t)
	t.Parallel()
	s := systest.Start(t, systest.Options{Rush: true, Overrides: []string{"RATE_LIMIT_PER_USER", "0"}})
	w := s.StartWorker("w1")
	rep, err := loadtest.Run(loadContext(t), "soak", loadtest.Options{BaseURL: s.URL, Secret: s.Cfg.JWTSecret,
		Concurrency: 20, Rate: 50, Duration: 3 * time.Second, SampleEvery: time.Second, Idle: time.Second,
		Retention: s.Cfg.RequestRetention, RedisURL: s.Cfg.Redis.URL, DatabaseURL: s.Cfg.DatabaseURL,
		MetricsURLs: map[string]string{"api": s.URL + "/metrics", "worker": w.URL + "/metrics"}})
	require.NoError(t, err)
	var text bytes.Buffer
	rep.WriteText(&text)
	t.Log(text.String())
	require.Empty(t, rep.Errors)
	for _, v := range rep.Violations {
		require.True(t, strings.HasPrefix(v, "soak: "), "only a soak check may fail: %s", v)
	}
	require.Equal(t, 150, rep.Accepted)
	require.Equal(t, 150, rep.Outcomes["probe succeeded"])
	soak := rep.Soak
	require.NotNil(t, soak)
	require.Positive(t, soak.WriteRate) // how close to the 50 asked is a matter of the machine's load, not asserted
	samples := soak.Samples
	require.GreaterOrEqual(t, len(samples), 5, "the baseline, one a second, the end of the writes, and in the idle wait")
	require.Equal(t, loadtest.PhaseBaseline, samples[0].Phase)
	require.Zero(t, samples[0].Keys)
	require.Equal(t, loadtest.PhaseIdle, samples[len(samples)-1].Phase)
	require.Equal(t, 150, samples[len(samples)-1].Keys, "distinct keys = writes")
	for _, smp := range samples {
		require.Empty(t, smp.Errors)
		for _, part := range []string{"api rss", "worker rss", "api heap", "worker heap", "redis keys", "redis MiB", "requests MiB"} {
			require.Positive(t, smp.Values[part], part)
		}
		require.Contains(t, smp.Values, "requests rows")
	}
	end := samples[len(samples)-1]
	require.Equal(t, 150.0, end.Values["requests rows"], "a week's retention keeps every request")
	require.Greater(t, end.Values["redis keys"], samples[0].Values["redis keys"])
	require.Len(t, soak.Checks, 5)
}
