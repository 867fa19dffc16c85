package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/internal/testenv"
	"github.com/holdfast/holdfast/probe"
	"github.com/holdfast/holdfast/tasks"
)

// The dashboard and the alert rules in dashboards/ query metrics by name; a
// renamed or never-exported metric would leave a panel empty and an alert
// silent without any error. This test reads every PromQL expression they
// hold, drives real traffic through the API and a worker while a real
// Prometheus scrapes both, requires every name to have series in one of
// them, and then every panel's every query to have data in Prometheus, as
// Grafana would draw it. Asynqmon's Metrics tab reads the same Prometheus.
func TestDashboardMetricsAreExported(t *testing.T) {
	t.Parallel()
	used := dashboardMetricNames(t)
	for _, known := range []string{"holdfast_requests_accepted_total", "holdfast_request_duration_seconds_bucket",
		"asynq_queue_latency_seconds", "holdfast_redis_used_memory_bytes", "holdfast_event_remaining_seats",
		"holdfast_http_too_many_requests_total"} {
		require.Contains(t, used, known, "the extraction missed a name the dashboard or the rules use")
	}

	// A private Redis with a memory limit, to see the limit exported; a
	// backlog cap of 2 so a third write on one key is refused with 429.
	redisURL, rdb := testenv.RedisServer(t, "--maxmemory", "64mb")
	promStart := time.Now()
	prom := startPrometheus(t)
	s := systest.Start(t, systest.Options{RedisURL: redisURL,
		Overrides: []string{"KEY_BACKLOG_CAP", "2", "EVENTS_RECONCILE_INTERVAL", "1s", "PROMETHEUS_URL", prom.URL}})
	prom.Scrape("holdfast-api", strings.TrimPrefix(s.URL, "http://"))
	apiMetrics := s.URL + "/metrics"
	// Another application's Asynq queue in the same Redis database.
	other := asynq.NewClientFromRedisClient(rdb)
	_, err := other.Enqueue(asynq.NewTask("invoice:send", nil), asynq.Queue("billing"))
	require.NoError(t, err)

	// No worker yet: accepted requests stay open, the oldest ages, and the
	// third write on one key is OVERLOADED.
	u := s.Client("dash-user", domain.RoleUser)
	var ids []string
	refused := 0
	for range 4 {
		r := u.Do("POST", "/api/v1/probe", probe.Payload{Keys: []string{"dash-hot"}})
		if r.Status == http.StatusTooManyRequests {
			require.Equal(t, domain.CodeOverloaded, r.ErrorCode(t))
			refused++
			continue
		}
		require.Equal(t, http.StatusAccepted, r.Status, "%s", r.Body)
		var a systest.Accepted
		r.JSON(t, &a)
		ids = append(ids, a.RequestID)
	}
	require.Len(t, ids, 2, "the backlog cap admits two")
	require.Equal(t, 2, refused)
	require.Eventually(t, func() bool {
		return gaugeValue(t, scrape(t, apiMetrics), "holdfast_requests_oldest_open_seconds") > 0.2
	},
		10*time.Second, 50*time.Millisecond, "the oldest open request ages while no worker runs")

	w := s.StartWorker("dash-w")
	prom.Scrape("holdfast-worker", strings.TrimPrefix(w.URL, "http://"))
	for _, id := range ids {
		require.Equal(t, domain.StatusSucceeded, u.Wait(id, 30*time.Second).Status)
	}
	e := newEvent(t, s, map[string]any{"name": "Dashboard", "seatCount": 3})
	seatOf(t, fcfs(t, u, e.EventID, nil))
	// The same FCFS request twice at once: the second is DUPLICATE_REQUEST.
	fan := s.Client("dash-fan", domain.RoleUser)
	path := fmt.Sprintf("/api/v1/events/%d/seats/fcfs", e.EventID)
	require.Equal(t, http.StatusAccepted, fan.Do("POST", path, nil).Status)
	r := fan.Do("POST", path, nil)
	require.Equal(t, http.StatusTooManyRequests, r.Status, "%s", r.Body)
	require.Equal(t, domain.CodeDuplicateRequest, r.ErrorCode(t))
	staff := s.Client("dash-staff", domain.RoleStaff)
	hotel := availCreate(t, staff, "/api/v1/hotels", map[string]string{"name": "Dash", "timezone": "UTC", "currency": "EUR"}, "hotelId")
	from := time.Now().UTC().AddDate(0, 0, 30).Format(domain.DateLayout)
	to := time.Now().UTC().AddDate(0, 0, 32).Format(domain.DateLayout)
	availability := fmt.Sprintf("/api/v1/hotels/%d/availability?from=%s&to=%s", hotel, from, to)
	r = staff.Do("GET", availability, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	s.WaitAllTerminal(20 * time.Second)

	// Gauges such as the events' come from a periodic task: scrape until
	// everything is there or time is up.
	var missing []string
	var api, wrk string
	deadline := time.Now().Add(30 * time.Second)
	for {
		api, wrk = scrape(t, apiMetrics), scrape(t, w.URL+"/metrics")
		missing = missingMetrics(used, exportedNames(api), exportedNames(wrk))
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // a poll's pace: /metrics has no push
	}
	require.Empty(t, missing, "used by dashboards/ but exported by neither the API nor the worker")

	// The new metrics say what they should.
	require.Zero(t, gaugeValue(t, api, "holdfast_requests_oldest_open_seconds"), "nothing is open any more")
	require.Equal(t, float64(64<<20), gaugeValue(t, api, "holdfast_redis_maxmemory_bytes"))
	require.Positive(t, gaugeValue(t, api, "holdfast_redis_used_memory_bytes"))
	require.Contains(t, api, `holdfast_http_request_duration_seconds_count{method="GET",route="/api/v1/hotels/:hotelId/availability",status="2xx"} 1`,
		"latency is recorded under the route pattern")
	require.NotContains(t, api, fmt.Sprintf("/hotels/%d", hotel), "never under the path: ids would multiply series")
	require.Contains(t, api, `holdfast_requests_overloaded_total{queue="probe"} 2`)
	require.Contains(t, api, `holdfast_http_too_many_requests_total{code="OVERLOADED"} 2`)
	require.Contains(t, api, `holdfast_http_too_many_requests_total{code="DUPLICATE_REQUEST"} 1`)
	require.Contains(t, api, `holdfast_http_too_many_requests_total{code="RATE_LIMITED"} 0`)
	require.Contains(t, wrk, `holdfast_keyed_takeovers_total{queue="events"} 0`, "per-queue counters start at zero")

	// In Prometheus, every panel's every query has a number to draw over
	// the test's time range. Writes and reads trickle on meanwhile, as on a
	// live system: a latency quantile needs a histogram that grew between
	// two scrapes.
	dash := loadDashboard(t)
	vars := dash.variables(t)
	var lacking []string
	deadline = time.Now().Add(40 * time.Second)
	for i := 0; ; i++ {
		lacking = prometheusLacks(t, prom, dash.queries(), vars, promStart)
		if len(lacking) == 0 || time.Now().After(deadline) {
			break
		}
		u.Probe(probe.Payload{Keys: []string{fmt.Sprintf("dash-trickle-%d", i)}})
		require.Equal(t, http.StatusOK, staff.Do("GET", availability, nil).Status)
		// The trickle's pace: a quantile needs a histogram that grew between
		// two of Prometheus's scrapes, which come on its own interval.
		time.Sleep(300 * time.Millisecond)
	}
	require.Empty(t, lacking, "the dashboard in a real Prometheus")
	require.Contains(t, prom.LabelValues("asynq_queue_size", "queue"), "billing",
		"control: Prometheus has the other application's queue, which $queue leaves out")

	// Asynqmon's Metrics tab: the API asks the same Prometheus for Asynq's
	// queue metrics, which it exports itself.
	admin := s.Client("dash-admin", domain.RoleAdmin)
	r = admin.Do("GET", "/monitoring/api/metrics?duration=300", nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var tab map[string]struct {
		Status string `json:"status"`
		Data   struct {
			Result []promSeries `json:"result"`
		} `json:"data"`
	}
	r.JSON(t, &tab)
	require.Equal(t, "success", tab["queue_size"].Status, "%s", r.Body)
	var charted []string
	for _, series := range tab["queue_size"].Data.Result {
		charted = append(charted, series.Metric["queue"])
	}
	require.Contains(t, charted, probe.Queue, "%s", r.Body)
}

// prometheusLacks lists what a Grafana user of the dashboard would miss in
// prom: a query of a panel with no number to draw since start, a variable
// with no values, a $queue that lists another application's queue (or not
// the probe queue written to), a 429 code without its series.
func prometheusLacks(t *testing.T, prom *promServer, queries []panelQuery, vars map[string]labelQuery, start time.Time) []string {
	t.Helper()
	var lacks []string
	values := map[string]string{}
	for name, v := range vars {
		got := prom.LabelValues(v.selector, v.label)
		if len(got) == 0 {
			lacks = append(lacks, "variable "+name+" has no values")
		}
		values[name] = "(" + strings.Join(got, "|") + ")"
		if name == "queue" && (!slices.Contains(got, probe.Queue) || slices.Contains(got, "billing")) {
			lacks = append(lacks, fmt.Sprintf("$queue lists %v: want holdfast's queues only, probe among them", got))
		}
	}
	for _, q := range queries {
		expr := grafanaToPromQL(q.expr, "10s", values)
		if !slices.ContainsFunc(prom.QueryRange(expr, start), promSeries.finite) {
			lacks = append(lacks, fmt.Sprintf("panel %q has no data: %s", q.panel, expr))
		}
	}
	var codes []string
	for _, series := range prom.QueryRange(`sum by (code) (holdfast_http_too_many_requests_total)`, start) {
		codes = append(codes, series.Metric["code"])
	}
	slices.Sort(codes)
	if want := slices.Sorted(slices.Values(domain.TooManyRequestsCodes)); !slices.Equal(want, codes) {
		lacks = append(lacks, fmt.Sprintf("429 by code has %v, want %v", codes, want))
	}
	return lacks
}

// Before any traffic (a fresh deployment with an event in its database, the
// API and a worker just started), every name the dashboard and the rules
// use is exported already: each counter is there at 0 for every label value
// known at start (each 429 code, each write type, each queue, each FCFS
// outcome), so a panel draws 0 rather than "No data", and increase() sees
// the first event. TestDashboardNameCheckCanFail and
// metrics.TestCountersExportedAtZero are the controls: a name missing from
// the scrape is reported, and a counter not initialised is missing.
func TestDashboardMetricsExportedAtStart(t *testing.T) {
	t.Parallel()
	used := dashboardMetricNames(t)
	s := systest.Start(t, systest.Options{Overrides: []string{"EVENTS_RECONCILE_INTERVAL", "1s"}})
	_, err := events.SeedDemo(t.Context(), s.Pool)
	require.NoError(t, err)
	w := s.StartWorker("fresh-w")

	var missing []string
	var api, wrk string
	deadline := time.Now().Add(30 * time.Second)
	for {
		api, wrk = scrape(t, s.URL+"/metrics"), scrape(t, w.URL+"/metrics")
		missing = missingMetrics(used, exportedNames(api), exportedNames(wrk))
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // a poll's pace: /metrics has no push
	}
	require.Empty(t, missing, "used by dashboards/ but not exported before the first request")

	for _, code := range domain.TooManyRequestsCodes {
		require.Contains(t, api, fmt.Sprintf(`holdfast_http_too_many_requests_total{code=%q} 0`, code))
	}
	for _, outcome := range []string{"success", "sold_out", "already_reserved", "contention", "not_found"} {
		require.Contains(t, wrk, fmt.Sprintf(`holdfast_fcfs_total{outcome=%q} 0`, outcome))
	}
	// The API declares the write types and queues the worker registers.
	queues := labelValuesIn(t, wrk, "holdfast_keyed_takeovers_total", "queue")
	require.Equal(t, []string{"events", "probe", "shop", "stays"}, queues)
	require.Equal(t, queues, labelValuesIn(t, api, "holdfast_requests_overloaded_total", "queue"))
	require.Equal(t, queues, labelValuesIn(t, wrk, "holdfast_keyed_batch_size_count", "queue"))
	types := labelValuesIn(t, wrk, "holdfast_requests_completed_total", "type")
	require.Contains(t, types, probe.TypeIncr)
	require.Equal(t, types, labelValuesIn(t, api, "holdfast_requests_accepted_total", "type"))
	require.Equal(t, types, labelValuesIn(t, wrk, "holdfast_request_duration_seconds_count", "type"))
	for _, tp := range types {
		require.Contains(t, api, fmt.Sprintf(`holdfast_requests_accepted_total{type=%q} 0`, tp))
		require.Contains(t, wrk, fmt.Sprintf(`holdfast_requests_completed_total{code="INTERNAL",outcome="failed",type=%q} 0`, tp))
	}

	// Every queue selector written out in dashboards/ names exactly
	// holdfast's queues: the verticals' and the maintenance queue.
	own := slices.Sorted(slices.Values(append(slices.Clone(queues), tasks.MaintenanceQueue)))
	selectors := 0
	for expr, where := range dashboardExpressions(t) {
		for _, m := range queueRegex.FindAllStringSubmatch(expr, -1) {
			selectors++
			got := strings.Split(m[1], "|")
			slices.Sort(got)
			require.Equal(t, own, got, "%s: %s", where, expr)
		}
	}
	require.GreaterOrEqual(t, selectors, 5, "the $queue variable and the Asynq alerts select holdfast's queues")
}

// queueRegex finds a queue selector written out (not a Grafana variable).
var queueRegex = regexp.MustCompile(`queue=~"([^"$]+)"`)

// labelValuesIn returns the sorted values label takes in the samples of
// metric in a text exposition.
func labelValuesIn(t *testing.T, exposition, metric, label string) []string {
	t.Helper()
	pair := regexp.MustCompile(`\b` + label + `="([^"]*)"`)
	seen := map[string]bool{}
	for line := range strings.SplitSeq(exposition, "\n") {
		if strings.HasPrefix(line, metric+"{") {
			if m := pair.FindStringSubmatch(line); m != nil {
				seen[m[1]] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// Asynqmon's Metrics tab is there when PROMETHEUS_URL is set: the page the
// real /monitoring handler serves carries the address, which its script
// turns into the tab, and is empty without it (no tab).
func TestAsynqmonMetricsTab(t *testing.T) {
	t.Parallel()
	flag := regexp.MustCompile(`window\.FLAG_PROMETHEUS_SERVER_ADDRESS="([^"]*)"`)
	address := func(s *systest.System) string {
		t.Helper()
		r := s.Client("root", domain.RoleAdmin).Do("GET", "/monitoring/", nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
		m := flag.FindSubmatch(r.Body)
		require.NotNil(t, m, "no Prometheus address in %s", r.Body)
		return strings.ReplaceAll(string(m[1]), `\/`, "/") // html/template escapes / in a script
	}
	const prom = "http://prometheus.internal:9090"
	with := systest.Start(t, systest.Options{Overrides: []string{"PROMETHEUS_URL", prom}})
	without := systest.Start(t, systest.Options{})
	require.Equal(t, prom, address(with))
	require.Empty(t, address(without))
}

// The name check itself can fail: a made-up name in an expression is
// reported, and the extraction finds exactly the metric names of samples
// that use functions, aggregations, grouping, matchers, strings, durations
// and Grafana variables, and none of those words.
func TestDashboardNameCheckCanFail(t *testing.T) {
	t.Parallel()
	cases := []struct {
		expr string
		want []string
	}{
		{`sum by (type) (rate(holdfast_requests_accepted_total[$__rate_interval]))`, []string{"holdfast_requests_accepted_total"}},
		{`histogram_quantile(0.99, sum by (le, type) (rate(holdfast_request_duration_seconds_bucket{type=~"probe.*", le!="+Inf"}[5m])))`,
			[]string{"holdfast_request_duration_seconds_bucket"}},
		{`max by (queue) (a_gauge - a_gauge offset 15m) > 0 and on (queue) group_left (state) b_info unless ignoring(x) c`,
			[]string{"a_gauge", "b_info", "c"}},
		{`sum without (instance) (rate(x_total[5m:1m])) / ignoring (code) group_right sum(y_total) BY (q)`, []string{"x_total", "y_total"}},
		{`label_replace(up{job="by"}, "sum", "$1", "rate", "(.*)") * on() group_left topk(3, {__name__="named_by_matcher"}) @ 1700000000`,
			[]string{"named_by_matcher", "up"}},
		{"count_values(\"v\", z) # a comment naming not_a_metric\n or vector(1) or absent(nan_metric) > bool Inf", []string{"nan_metric", "z"}},
		{`max(holdfast_redis_maxmemory_bytes{node=~"$node"} > 0) and quantile_over_time(0.9, w[${__range}])`,
			[]string{"holdfast_redis_maxmemory_bytes", "w"}},
	}
	for _, tc := range cases {
		got, err := promqlMetricNames(tc.expr)
		require.NoError(t, err, tc.expr)
		require.Equal(t, tc.want, got, tc.expr)
	}
	for _, bad := range []string{`rate(x[5m]`, `sum(x{a="b})`, `x{a="b"`} {
		_, err := promqlMetricNames(bad)
		require.Error(t, err, "unbalanced: %s", bad)
	}

	exported := exportedNames("# HELP holdfast_known_total x\n# TYPE holdfast_known_total counter\nholdfast_known_total{q=\"a\"} 1\n" +
		"h_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n")
	used := map[string][]string{}
	for _, expr := range []string{`sum(rate(holdfast_known_total[5m])) + holdfast_no_such_metric`,
		`histogram_quantile(0.5, rate(h_bucket[5m])) / h_count + h_sum`} {
		names, err := promqlMetricNames(expr)
		require.NoError(t, err)
		for _, n := range names {
			used[n] = append(used[n], "sample")
		}
	}
	require.Equal(t, []string{"holdfast_no_such_metric (sample)"}, missingMetrics(used, exported))
}

// promtool (Prometheus' own parser and rule engine) accepts the scrape
// configuration, the alert rules and every dashboard expression, and the
// rules' unit tests pass. promtool must be installed (Debian package
// prometheus; .ci/run installs it): this test does not skip.
func TestPromtoolChecksDashboards(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool not found: apt-get install prometheus (.ci/run does)")
	run := func(args ...string) error {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("promtool %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	require.NoError(t, run("check", "config", "../dashboards/prometheus.yml"))
	require.NoError(t, run("check", "rules", "../dashboards/alerts.yml"))
	require.NoError(t, run("test", "rules", "../dashboards/alerts_test.yml"))
	// Control: HoldfastTasksArchived as it was, `x - x offset 15m`, has no
	// value before Prometheus holds 15 minutes; the fresh case catches it.
	const archived = `asynq_tasks_enqueued_total{state="archived", queue=~"events|maintenance|probe|shop|stays"}`
	err = run("test", "rules", rulesWith(t, "HoldfastTasksArchived", "max by (queue) ("+archived+" - "+archived+" offset 15m) > 0"))
	require.ErrorContains(t, err, "alertname: HoldfastTasksArchived, time: 3m")

	// Every dashboard expression, with Grafana's variables filled in, as a
	// recording rule: `check rules` parses each with the real PromQL parser.
	exprs := dashboardExpressions(t)
	require.NotEmpty(t, exprs)
	asRules := func(exprs []string) string {
		rules := make([]map[string]string, len(exprs))
		for i, e := range exprs {
			rules[i] = map[string]string{"record": fmt.Sprintf("holdfast:dashboard_expr_%d", i), "expr": grafanaToPromQL(e, "5m", nil)}
		}
		out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), "dashboard_rules.yml")
		require.NoError(t, os.WriteFile(path, out, 0o600))
		return path
	}
	require.NoError(t, run("check", "rules", asRules(slices.Sorted(maps.Keys(exprs)))))
	// Control: the same check refuses a broken expression.
	require.Error(t, run("check", "rules", asRules([]string{`sum by (le (rate(holdfast_keyed_batch_size_bucket[5m]))`})))
}

// rulesWith writes alerts.yml with alert's expression replaced by expr, and
// alerts_test.yml beside it, to a temporary directory, and returns the path
// of the tests there.
func rulesWith(t *testing.T, alert, expr string) string {
	t.Helper()
	raw, err := os.ReadFile("../dashboards/alerts.yml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Name  string           `yaml:"name"`
			Rules []map[string]any `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	found := false
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r["alert"] == alert {
				r["expr"], found = expr, true
			}
		}
	}
	require.True(t, found, "no alert %s", alert)
	out, err := yaml.Marshal(rules)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "alerts.yml"), out, 0o600))
	tests, err := os.ReadFile("../dashboards/alerts_test.yml")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "alerts_test.yml"), tests, 0o600))
	return filepath.Join(dir, "alerts_test.yml")
}

// grafanaVar matches Grafana's template variables: $name, ${name}, and the
// built-in interval variables ($__rate_interval, …).
var grafanaVar = regexp.MustCompile(`\$\{?(\w+)\}?`)

// grafanaToPromQL fills Grafana's variables in: the interval variables
// ($__rate_interval, …) become interval, the dashboard's own variables (used
// only inside regex matchers) their value in values, or anything.
func grafanaToPromQL(expr, interval string, values map[string]string) string {
	return grafanaVar.ReplaceAllStringFunc(expr, func(v string) string {
		name := grafanaVar.FindStringSubmatch(v)[1]
		if strings.HasPrefix(name, "__") {
			return interval
		}
		if val, ok := values[name]; ok {
			return val
		}
		return ".*"
	})
}

// labelValues is Grafana's variable query label_values(selector, label).
var labelValues = regexp.MustCompile(`^\s*label_values\((.+),\s*(\w+)\s*\)\s*$`)

// dashboard is dashboards/holdfast.json, the parts the tests read.
type dashboard struct {
	Panels     []dashPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type dashPanel struct {
	Type    string      `json:"type"`
	Title   string      `json:"title"`
	Panels  []dashPanel `json:"panels"` // a collapsed row keeps its panels here
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile("../dashboards/holdfast.json")
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(raw, &d))
	return d
}

// panelQuery is one query of a panel.
type panelQuery struct{ panel, expr string }

// queries returns every query of every panel, rows' panels included.
func (d dashboard) queries() []panelQuery {
	var out []panelQuery
	var walk func(ps []dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			for _, tg := range p.Targets {
				out = append(out, panelQuery{panel: p.Title, expr: tg.Expr})
			}
			if len(p.Targets) == 0 {
				out = append(out, panelQuery{panel: p.Title})
			}
		}
	}
	walk(d.Panels)
	return out
}

// labelQuery is a query variable's label_values(selector, label).
type labelQuery struct{ selector, label string }

// variables returns the dashboard's query variables.
func (d dashboard) variables(t *testing.T) map[string]labelQuery {
	t.Helper()
	out := map[string]labelQuery{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		lv := labelValues.FindStringSubmatch(q)
		require.NotNil(t, lv, "variable %s: only label_values(selector, label) is understood, got %q", v.Name, q)
		out[v.Name] = labelQuery{selector: lv[1], label: lv[2]}
	}
	return out
}

// dashboardExpressions returns every PromQL expression of
// dashboards/holdfast.json (panel targets and the selectors of query
// variables) and of dashboards/alerts.yml, each with where it is used.
func dashboardExpressions(t *testing.T) map[string]string {
	t.Helper()
	exprs := map[string]string{}
	dash := loadDashboard(t)
	queries := dash.queries()
	require.NotEmpty(t, queries)
	for _, q := range queries {
		require.NotEmpty(t, strings.TrimSpace(q.expr), "panel %q has an empty or no query", q.panel)
		exprs[q.expr] = "panel " + strconv.Quote(q.panel)
	}
	for name, v := range dash.variables(t) {
		exprs[v.selector] = "variable " + name
	}

	raw, err := os.ReadFile("../dashboards/alerts.yml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, strings.TrimSpace(r.Expr), "rule %s%s has no expr", r.Alert, r.Record)
			exprs[r.Expr] = "alert " + r.Alert + r.Record
			n++
		}
	}
	require.Positive(t, n)
	return exprs
}

// dashboardMetricNames maps each metric name the dashboard and the rules use
// to where they use it.
func dashboardMetricNames(t *testing.T) map[string][]string {
	t.Helper()
	used := map[string][]string{}
	for expr, where := range dashboardExpressions(t) {
		names, err := promqlMetricNames(expr)
		require.NoError(t, err, "%s: %s", where, expr)
		require.NotEmpty(t, names, "%s selects no metric: %s", where, expr)
		for _, n := range names {
			used[n] = append(used[n], where)
		}
	}
	return used
}

// promqlGrouping are the keywords followed by a parenthesised label list.
var promqlGrouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true}

// promqlWords are the other keywords and literals that are not metric names.
var promqlWords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"atan2": true, "inf": true, "nan": true}

// promqlMetricNames returns the sorted metric names an expression selects.
// It is a tokenizer, not a parser (Prometheus' parser would bring its whole
// module, a few hundred requirements, into go.mod); promtool parses the same
// expressions in TestPromtoolChecksDashboards, so they are known to be well
// formed. An identifier is a metric name unless it is a keyword, is followed
// by "(" (a function or an aggregation) or by by/without (an aggregation
// whose grouping comes first), sits inside {} (a label, except the string
// of a __name__= matcher), inside [] (a range) or inside a string, or is a
// Grafana variable ($name, ${name}).
func promqlMetricNames(expr string) ([]string, error) {
	found := map[string]bool{}
	s := expr
	i := 0
	isIdentStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isIdent := func(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }
	skipSpace := func(j int) int {
		for j < len(s) && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r') {
			j++
		}
		return j
	}
	ident := func(j int) (string, int) {
		k := j
		for k < len(s) && isIdent(s[k]) {
			k++
		}
		return s[j:k], k
	}
	// str returns the end of the string literal starting at j and its text.
	str := func(j int) (int, string, error) {
		q := s[j]
		var b strings.Builder
		for k := j + 1; k < len(s); k++ {
			switch {
			case s[k] == '\\' && q != '`' && k+1 < len(s):
				k++
				b.WriteByte(s[k])
			case s[k] == q:
				return k + 1, b.String(), nil
			default:
				b.WriteByte(s[k])
			}
		}
		return 0, "", fmt.Errorf("unterminated string at %d in %q", j, expr)
	}
	// closing returns the index after the bracket that closes the one at j,
	// skipping strings.
	closing := func(j int, open, close byte) (int, error) {
		depth := 0
		for k := j; k < len(s); k++ {
			switch s[k] {
			case '"', '\'', '`':
				end, _, err := str(k)
				if err != nil {
					return 0, err
				}
				k = end - 1
			case open:
				depth++
			case close:
				depth--
				if depth == 0 {
					return k + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("unbalanced %c at %d in %q", open, j, expr)
	}
	parens := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			end, _, err := str(i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '$':
			i++
			if i < len(s) && s[i] == '{' {
				end, err := closing(i, '{', '}')
				if err != nil {
					return nil, err
				}
				i = end
			} else {
				_, i = ident(i)
			}
		case c == '{':
			end, err := closing(i, '{', '}')
			if err != nil {
				return nil, err
			}
			// Inside the matchers only a __name__="x" matcher names a metric.
			for j := i + 1; j < end-1; {
				switch {
				case s[j] == '"' || s[j] == '\'' || s[j] == '`':
					e, _, _ := str(j)
					j = e
				case isIdentStart(s[j]):
					var name string
					name, j = ident(j)
					k := skipSpace(j)
					if name == "__name__" && k < end && s[k] == '=' && k+1 < end && s[k+1] != '~' {
						k = skipSpace(k + 1)
						if k < end && (s[k] == '"' || s[k] == '\'' || s[k] == '`') {
							e, v, _ := str(k)
							found[v] = true
							j = e
						}
					}
				default:
					j++
				}
			}
			i = end
		case c == '[':
			end, err := closing(i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = end
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			// A number or a duration (1e-3, 0x1f, 5m30s, 1.5).
			for i < len(s) && (isIdent(s[i]) || s[i] == '.' ||
				(s[i] == '+' || s[i] == '-') && (s[i-1] == 'e' || s[i-1] == 'E')) {
				i++
			}
		case isIdentStart(c):
			var name string
			name, i = ident(i)
			lower := strings.ToLower(name)
			next := skipSpace(i)
			nextWord, _ := ident(next)
			switch {
			case promqlGrouping[lower]:
				if next < len(s) && s[next] == '(' {
					end, err := closing(next, '(', ')')
					if err != nil {
						return nil, err
					}
					i = end
				}
			case promqlWords[lower]:
			case next < len(s) && s[next] == '(':
			case strings.EqualFold(nextWord, "by") || strings.EqualFold(nextWord, "without"):
			default:
				found[name] = true
			}
		case c == '(':
			parens++
			i++
		case c == ')':
			parens--
			if parens < 0 {
				return nil, fmt.Errorf("unbalanced ) at %d in %q", i, expr)
			}
			i++
		default:
			i++
		}
	}
	if parens != 0 {
		return nil, fmt.Errorf("unbalanced ( in %q", expr)
	}
	names := make([]string, 0, len(found))
	for n := range found {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// scrape returns the text of a /metrics answer.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	return string(body)
}

// exportedNames returns the names of the samples in a text exposition: a
// histogram family x appears as x_bucket, x_sum and x_count, which is how
// PromQL selects it.
func exportedNames(exposition string) map[string]bool {
	names := map[string]bool{}
	for line := range strings.SplitSeq(exposition, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		if end := strings.IndexAny(line, "{ "); end > 0 {
			names[line[:end]] = true
		}
	}
	return names
}

// missingMetrics lists the used names no exposition has samples of, each
// with where it is used.
func missingMetrics(used map[string][]string, expositions ...map[string]bool) []string {
	var missing []string
	for name, where := range used {
		if !slices.ContainsFunc(expositions, func(e map[string]bool) bool { return e[name] }) {
			w := slices.Clone(where)
			sort.Strings(w)
			missing = append(missing, fmt.Sprintf("%s (%s)", name, strings.Join(slices.Compact(w), ", ")))
		}
	}
	sort.Strings(missing)
	return missing
}

// gaugeValue reads the value of an unlabelled or single-series metric.
func gaugeValue(t *testing.T, exposition, name string) float64 {
	t.Helper()
	for line := range strings.SplitSeq(exposition, "\n") {
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			require.NoError(t, err, line)
			return v
		}
	}
	require.Failf(t, "metric not exported", "%s", name)
	return 0
}
