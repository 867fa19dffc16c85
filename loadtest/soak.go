package loadtest

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/client"
)

// soak: probe writes at a steady Rate (default 300/s) for Duration
// (default 5 min), each on a serialization key never used before and each
// followed to its outcome, while it samples every SampleEvery (default
// 30 s) what the run leaves behind: the API's and the worker's resident
// memory and heap in use, Redis' used_memory and key count, and the size
// and rows of the tables that grow with requests and keys (soakTables). A
// baseline sample is taken before the first write; with Idle, sampling
// goes on that long after the last write, so keys can go idle and
// retention pass. The report has the samples and issue 20's checks
// computed from them (SoakReport); a failing check is a violation.
//
// Its writers are Rate users, each writing about once a second, well under
// the API's default per-user limit, so the keys grow and the users do not.
type soak struct {
	rate, total                              int
	duration, every, idle, retention, warmUp time.Duration
	metrics                                  map[string]string
	hc                                       *http.Client
	rdb                                      *redis.Client // nil: not sampled
	db                                       *pgx.Conn     // nil: not sampled

	keys     atomic.Int64 // writes the API accepted: each is a new key
	once     sync.Once
	t0       time.Time // the first write's scheduled start
	stop     chan struct{}
	sampling sync.WaitGroup
	idling   atomic.Bool

	mu      sync.Mutex // the samples, and one sample at a time
	samples []SoakSample
	rep     *SoakReport
}

// SoakSample is what the soak scenario read at one moment: each part in
// Values, by its column of the text report (soakColumns); a part that could
// not be read is absent, and Errors says why.
type SoakSample struct {
	// Seconds since the first write (the baseline is a little before it).
	Seconds float64 `json:"seconds"`
	Phase   string  `json:"phase"`
	// Keys is the number of distinct serialization keys written so far.
	Keys   int                `json:"keys"`
	Values map[string]float64 `json:"values"`
	Errors []string           `json:"errors,omitempty"`
	at     time.Time
}

// Soak sampling phases.
const (
	PhaseBaseline = "baseline" // before the first write
	PhaseWrites   = "writes"   // while writing, and the sample as the last write ended
	PhaseIdle     = "idle"     // after the last write (Options.Idle)
)

// soakProcesses are the processes whose memory is sampled, when their
// /metrics is known: process_resident_memory_bytes and
// go_memstats_heap_inuse_bytes, in MiB ("api rss", "api heap").
var soakProcesses = []string{"api", "worker"}

// soakTables are the tables that grow with requests and keys, sampled by
// their row count and pg_total_relation_size (table, indexes and TOAST) in
// MiB ("requests rows", "requests MiB"). One that does not exist (a schema
// without it) is left out of the samples.
var soakTables = []string{"requests", "key_fences", "key_progress"}

// soakColumns are the parts a sample reads, in order: each process's
// memory, Redis' INFO memory used_memory and DBSIZE, and each table's
// rows and size.
var soakColumns = func() []string {
	var cols []string
	for _, p := range soakProcesses {
		cols = append(cols, p+" rss", p+" heap")
	}
	cols = append(cols, "redis MiB", "redis keys")
	for _, t := range soakTables {
		cols = append(cols, t+" rows", t+" MiB")
	}
	return cols
}()

func (s *soak) Setup(ctx context.Context, e *Env) (int, error) {
	s.rate, s.duration, s.every = orDefault(e.Opt.Rate, 300), cmp.Or(max(e.Opt.Duration, 0), 5*time.Minute), cmp.Or(max(e.Opt.SampleEvery, 0), 30*time.Second)
	s.idle, s.retention, s.warmUp = max(e.Opt.Idle, 0), max(e.Opt.Retention, 0), max(e.Opt.WarmUp, 0)
	s.total = int(float64(s.rate) * s.duration.Seconds())
	if s.total < 1 {
		return 0, fmt.Errorf("soak: -rate %d for -duration %s is not one write", s.rate, s.duration)
	}
	s.metrics, s.hc, s.stop = e.Opt.MetricsURLs, &http.Client{Timeout: 5 * time.Second}, make(chan struct{})
	if e.Opt.RedisURL != "" {
		opt, err := redis.ParseURL(e.Opt.RedisURL)
		if err != nil {
			return 0, fmt.Errorf("soak: -redis: %w", err)
		}
		s.rdb = redis.NewClient(opt)
	}
	if e.Opt.DatabaseURL != "" {
		db, err := pgx.Connect(ctx, e.Opt.DatabaseURL)
		if err != nil {
			s.close()
			return 0, fmt.Errorf("soak: -database-url: %w", err)
		}
		s.db = db
	}
	s.sample(ctx, PhaseBaseline)
	return s.total, nil
}

func (s *soak) close() {
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
	if s.db != nil {
		_ = s.db.Close(context.Background())
	}
}

func (s *soak) Journey(ctx context.Context, e *Env, i int) error {
	s.once.Do(func() {
		s.t0 = time.Now()
		s.sampling.Go(func() { s.sampleEvery(ctx) })
	})
	// Write i starts i/rate seconds after the first; a run that falls
	// behind catches up as fast as its clients can.
	select {
	case <-time.After(time.Until(s.t0.Add(time.Duration(i) * time.Second / time.Duration(s.rate)))):
	case <-ctx.Done():
		return ctx.Err()
	}
	c, _, err := e.User(i % s.rate)
	if err != nil {
		return err
	}
	key := fmt.Sprintf("%s-%d", e.RunID, i)
	out, err := e.Write(ctx, c, "probe", func(ctx context.Context) (client.Accepted, error) {
		acc, err := c.Probe(ctx, []string{key})
		if err == nil && !acc.Replayed {
			s.keys.Add(1)
		}
		return acc, err
	})
	if err == nil {
		if err = out.Err(); err != nil {
			err = fmt.Errorf("probe on new key %s: %w", key, err)
		}
	}
	return err
}

// sampleEvery takes a sample every s.every from the first write until
// Check stops it.
func (s *soak) sampleEvery(ctx context.Context) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			phase := PhaseWrites
			if s.idling.Load() {
				phase = PhaseIdle
			}
			s.sample(ctx, phase)
		case <-s.stop:
			return
		case <-ctx.Done():
			return
		}
	}
}

// sample reads each process's /metrics, Redis and Postgres, each only when
// its address was given. The rows are counted exactly (count(*)): an
// estimate lags behind autovacuum, and the retention check must see the
// rows there are.
func (s *soak) sample(ctx context.Context, phase string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	smp := SoakSample{Phase: phase, Keys: int(s.keys.Load()), Values: map[string]float64{}, at: time.Now()}
	fail := func(part string, err error) { smp.Errors = append(smp.Errors, part+": "+err.Error()) }
	for _, p := range soakProcesses {
		if url, ok := s.metrics[p]; ok {
			vs, err := scrape(ctx, s.hc, url, metricRSS, metricHeap)
			if err == nil && len(vs) < 2 {
				err = fmt.Errorf("%s or %s not at %s", metricRSS, metricHeap, url)
			}
			if err != nil {
				fail(p, err)
				continue
			}
			smp.Values[p+" rss"], smp.Values[p+" heap"] = mib(vs[metricRSS]), mib(vs[metricHeap])
		}
	}
	if s.rdb != nil {
		info, err := s.rdb.InfoMap(ctx, "memory").Result()
		var used float64
		var keys int64
		if err == nil {
			used, err = strconv.ParseFloat(info["Memory"]["used_memory"], 64)
		}
		if err == nil {
			keys, err = s.rdb.DBSize(ctx).Result()
		}
		if err != nil {
			fail("redis", err)
		} else {
			smp.Values["redis MiB"], smp.Values["redis keys"] = round(used/(1<<20), 2), float64(keys)
		}
	}
	for _, t := range soakTables {
		if s.db == nil {
			break
		}
		var size *int64
		var rows int64
		err := s.db.QueryRow(ctx, `SELECT pg_total_relation_size(to_regclass($1))`, t).Scan(&size)
		if err == nil && size != nil {
			err = s.db.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{t}.Sanitize()).Scan(&rows)
		}
		if err != nil {
			fail("postgres", fmt.Errorf("%s: %w", t, err))
		} else if size != nil {
			smp.Values[t+" rows"], smp.Values[t+" MiB"] = float64(rows), round(float64(*size)/(1<<20), 2)
		}
	}
	s.samples = append(s.samples, smp)
}

// Check samples as the writes end, goes on sampling through the idle wait,
// and computes the checks from the samples.
func (s *soak) Check(ctx context.Context, _ *Env) ([]string, error) {
	defer s.close()
	var writes time.Duration
	if !s.t0.IsZero() {
		writes = time.Since(s.t0)
	}
	s.sample(ctx, PhaseWrites)
	s.idling.Store(true)
	select {
	case <-time.After(s.idle):
	case <-ctx.Done():
	}
	close(s.stop)
	s.sampling.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("soak: idle wait: %w", err)
	}
	if s.idle > 0 && time.Since(s.samples[len(s.samples)-1].at) > s.every/10 { // unless a tick just took it
		s.sample(ctx, PhaseIdle)
	}
	t0 := s.t0
	if t0.IsZero() {
		t0 = s.samples[0].at
	}
	s.rep = &SoakReport{Rate: s.rate, WriteSeconds: round(writes.Seconds(), 1), IdleSeconds: s.idle.Seconds(),
		SampleEverySeconds: s.every.Seconds(), RetentionSeconds: s.retention.Seconds(), WarmUpSeconds: s.warmUp.Seconds()}
	for _, smp := range s.samples {
		smp.Seconds = round(smp.at.Sub(t0).Seconds(), 1)
		s.rep.Samples = append(s.rep.Samples, smp)
	}
	if writes > 0 {
		s.rep.WriteRate = round(float64(s.keys.Load())/writes.Seconds(), 1)
	}
	s.rep.Checks = s.rep.check()
	return s.rep.Violations(), nil
}

func (s *soak) report(r *Report) { r.Soak = s.rep }

// SoakReport is what the soak scenario sampled, and issue 20's checks
// computed from the samples.
type SoakReport struct {
	// Rate is the writes per second asked for; WriteRate the distinct keys
	// written divided by WriteSeconds, from the first write until the last
	// ended.
	Rate               int     `json:"rate"`
	WriteRate          float64 `json:"writeRate"`
	WriteSeconds       float64 `json:"writeSeconds"`
	IdleSeconds        float64 `json:"idleSeconds"`
	SampleEverySeconds float64 `json:"sampleEverySeconds"`
	// RetentionSeconds is the run's REQUEST_RETENTION, as the caller said
	// (Options.Retention); 0 when not given.
	RetentionSeconds float64 `json:"retentionSeconds,omitempty"`
	// WarmUpSeconds is when memory must start to hold (Options.WarmUp); 0
	// takes soakWarmUp of the write phase.
	WarmUpSeconds float64      `json:"warmUpSeconds,omitempty"`
	Samples       []SoakSample `json:"samples"`
	Checks        []SoakCheck  `json:"checks"`
}

// SoakCheck is one check: what was measured, against what, and the verdict.
type SoakCheck struct {
	Name     string `json:"name"`
	Measured string `json:"measured"`
	Bound    string `json:"bound"`
	Verdict  string `json:"verdict"`
}

// Soak verdicts. Only VerdictFail fails the run.
const (
	VerdictPass    = "pass"
	VerdictFail    = "FAIL"
	VerdictReport  = "report"  // measured, with no bound to hold it to
	VerdictSkipped = "skipped" // not measurable in this run; Measured says why
)

// The checks' bounds (issue 20's acceptance).
const (
	// soakWarmUp is the share of the write phase after which memory must
	// hold steady.
	soakWarmUp = 0.2
	// soakRSSBand is how far a process's RSS may move from its first
	// sample after warm-up.
	soakRSSBand = 0.15
	// Redis at the end of the idle wait may exceed its baseline by 15 %,
	// or by soakRedisKeySlack keys and soakRedisMemSlackMiB: an idle
	// holdfast keeps a few hundred keys of its own (Asynq's queues, servers
	// and daily statistics, limiter buckets that have not expired yet),
	// and its Lua scripts and client buffers take memory.
	soakRedisBand        = 0.15
	soakRedisKeySlack    = 500
	soakRedisMemSlackMiB = 2.0
	// soakRowsMargin multiplies rate × retention.
	soakRowsMargin = 1.2
)

// Violations are the failing checks, as the run's violations.
func (r *SoakReport) Violations() []string {
	var out []string
	for _, c := range r.Checks {
		if c.Verdict == VerdictFail {
			out = append(out, fmt.Sprintf("soak: %s: %s, want %s", c.Name, c.Measured, c.Bound))
		}
	}
	return out
}

// check computes the checks from the samples.
func (r *SoakReport) check() []SoakCheck {
	var out []SoakCheck
	for _, p := range soakProcesses {
		out = append(out, r.checkRSS(p))
	}
	return append(out, r.checkRedis("Redis keys", "redis keys", "%.0f", soakRedisKeySlack, "keys"),
		r.checkRedis("Redis used_memory", "redis MiB", "%.2f MiB", soakRedisMemSlackMiB, "MiB"), r.checkRows())
}

// checkRSS: after warm-up (the samples of the write phase after
// WarmUpSeconds, or else its first soakWarmUp), process p's RSS stays
// within soakRSSBand of its first sample there, while the distinct keys
// grow.
func (r *SoakReport) checkRSS(p string) SoakCheck {
	c := SoakCheck{Name: p + " RSS after warm-up", Bound: fmt.Sprintf("within ±%.0f%% of its first sample after warm-up", soakRSSBand*100)}
	warmUp := cmp.Or(r.WarmUpSeconds, soakWarmUp*r.WriteSeconds)
	var after []SoakSample
	for _, s := range r.Samples {
		if _, ok := s.Values[p+" rss"]; ok && s.Phase == PhaseWrites && s.Seconds > warmUp {
			after = append(after, s)
		}
	}
	if len(after) < 2 {
		c.Verdict, c.Measured = VerdictSkipped, fmt.Sprintf("%d samples of %s's RSS after warm-up (%.0f s), need 2", len(after), p, warmUp)
		return c
	}
	first, last := after[0], after[len(after)-1]
	ref, lo, hi, worst := first.Values[p+" rss"], math.Inf(1), math.Inf(-1), 0.0
	for _, s := range after {
		v := s.Values[p+" rss"]
		lo, hi = min(lo, v), max(hi, v)
		if d := v/ref - 1; math.Abs(d) > math.Abs(worst) {
			worst = d
		}
	}
	c.Measured = fmt.Sprintf("%.1f MiB at %.0f s, then %.1f–%.1f MiB (%+.1f%%) while keys grew %d → %d (×%.1f)",
		ref, first.Seconds, lo, hi, worst*100, first.Keys, last.Keys, float64(last.Keys)/float64(max(first.Keys, 1)))
	c.Verdict = verdict(math.Abs(worst) <= soakRSSBand)
	return c
}

// checkRedis compares Redis' last sample with the baseline. With an idle
// wait, the last may exceed the baseline by soakRedisBand or slack,
// whichever is more; without one it is only reported, since the keys of
// the last writes cannot have gone idle yet.
func (r *SoakReport) checkRedis(name, col, format string, slack float64, unit string) SoakCheck {
	c := SoakCheck{Name: name + " at the end vs the baseline"}
	b, l, seen := 0.0, 0.0, 0 // the baseline, the last sample, and how many of the two were read
	for _, s := range r.Samples {
		switch v, ok := s.Values[col]; {
		case ok && s.Phase == PhaseBaseline:
			b, seen = v, 1
		case ok && seen > 0:
			l, seen = v, 2
		}
	}
	if seen < 2 {
		c.Verdict, c.Measured = VerdictSkipped, "no Redis baseline and later sample (-redis)"
		return c
	}
	allowed := max(b*soakRedisBand, slack)
	c.Measured = fmt.Sprintf(format+" → "+format+" (%+.0f%%) after %.0f s idle", b, l, (l/b-1)*100, r.IdleSeconds)
	if r.IdleSeconds <= 0 {
		c.Verdict, c.Bound = VerdictReport, "a verdict needs an idle wait (-idle)"
		return c
	}
	c.Bound = fmt.Sprintf("≤ baseline + max(%.0f%%, %g %s) = "+format, soakRedisBand*100, slack, unit, b+allowed)
	c.Verdict = verdict(l-b <= allowed)
	return c
}

// checkRows: the requests rows never exceed the write rate × retention ×
// soakRowsMargin, plus the writes of one period of the retention task (a
// quarter of the retention, at least a second and at most a minute:
// worker.retention), which is how long past retention a request may wait
// for the task. Only when the run's retention is known.
func (r *SoakReport) checkRows() SoakCheck {
	c := SoakCheck{Name: "requests rows"}
	peak, at, seen := int64(0), 0.0, false
	for _, s := range r.Samples {
		if rows, ok := s.Values["requests rows"]; ok {
			seen = true
			if int64(rows) > peak {
				peak, at = int64(rows), s.Seconds
			}
		}
	}
	c.Measured = fmt.Sprintf("peak %d at %.0f s", peak, at)
	switch {
	case !seen:
		c.Verdict, c.Measured = VerdictSkipped, "no table sizes (-database-url)"
		return c
	case r.RetentionSeconds <= 0:
		c.Verdict, c.Bound = VerdictReport, "a verdict needs the run's retention (-retention)"
		return c
	}
	period := min(time.Minute, max(time.Duration(r.RetentionSeconds*float64(time.Second))/4, time.Second))
	slack := r.WriteRate * period.Seconds()
	bound := r.WriteRate*r.RetentionSeconds*soakRowsMargin + slack
	c.Bound = fmt.Sprintf("≤ %.1f/s × %.0f s × %.1f + %.0f (one retention-task period, %s) = %.0f",
		r.WriteRate, r.RetentionSeconds, soakRowsMargin, slack, period, bound)
	c.Verdict = verdict(float64(peak) <= bound)
	return c
}

func verdict(ok bool) string {
	if ok {
		return VerdictPass
	}
	return VerdictFail
}

// writeText prints the samples, a column per part and "–" where one was
// not read, what could not be read, and the checks.
func (r *SoakReport) writeText(w io.Writer) {
	fmt.Fprintf(w, "  soak: %d writes/s asked, %.1f/s written, each on a new key, for %.0f s, then %.0f s idle; a sample every %.0f s (memory in MiB)\n",
		r.Rate, r.WriteRate, r.WriteSeconds, r.IdleSeconds, r.SampleEverySeconds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "   \tt s\tphase\tkeys\t%s\t\n", strings.Join(soakColumns, "\t"))
	for _, s := range r.Samples {
		fmt.Fprintf(tw, "   \t%.1f\t%s\t%d", s.Seconds, s.Phase, s.Keys)
		for _, col := range soakColumns {
			cell := "–"
			if v, ok := s.Values[col]; ok {
				cell = soakCell(col, v)
			}
			fmt.Fprintf(tw, "\t%s", cell)
		}
		fmt.Fprint(tw, "\t\n")
	}
	_ = tw.Flush()
	for _, s := range r.Samples {
		for _, e := range s.Errors {
			fmt.Fprintf(w, "    at %.0f s, not read: %s\n", s.Seconds, e)
		}
	}
	fmt.Fprintln(w, "  soak checks:")
	for _, c := range r.Checks {
		fmt.Fprintln(w, strings.TrimSuffix(fmt.Sprintf("    %-7s %s: %s; %s", c.Verdict, c.Name, c.Measured, c.Bound), "; "))
	}
}

// soakCell is a sample's value in its column's format: counts whole,
// Redis' and the tables' sizes to a hundredth of a MiB, each process's
// memory to a tenth.
func soakCell(col string, v float64) string {
	switch {
	case strings.HasSuffix(col, " rows"), strings.HasSuffix(col, " keys"):
		return fmt.Sprintf("%.0f", v)
	case strings.HasSuffix(col, " MiB"):
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}
