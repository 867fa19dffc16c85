package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
)

// promServer is a private Prometheus server (the real one, Debian package
// prometheus) that scrapes a test's API and workers every second, with the
// job names of dashboards/prometheus.yml.
type promServer struct {
	t   *testing.T
	URL string
	dir string // its configuration, one file_sd file per job, data and log
}

// promClient asks the private Prometheus, never waiting long on a port that
// turned out to be someone else's.
var promClient = &http.Client{Timeout: 10 * time.Second}

// promScrapeInterval is how often the private Prometheus scrapes.
const promScrapeInterval = time.Second

// promJobs are the scrape jobs, as in dashboards/prometheus.yml; Scrape
// gives them their targets.
var promJobs = []string{"holdfast-api", "holdfast-worker"}

// startPrometheus starts Prometheus on a free loopback port, with no targets
// yet, and stops it when the test ends. It is started before what it will
// scrape, so its address can be configured there (PROMETHEUS_URL); a port
// taken in the moment between finding it free and binding it is tried again
// with another.
func startPrometheus(t *testing.T) *promServer {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	require.NoError(t, err, "prometheus not found: apt-get install prometheus (.ci/run does)")
	for attempt := 1; ; attempt++ {
		p, err := runPrometheus(t, bin, testenv.FreePort(t))
		if err == nil {
			return p
		}
		require.Less(t, attempt, 3, "%v", err)
	}
}

// runPrometheus runs Prometheus on port until the test ends and waits until
// it is ready; it returns an error if Prometheus exits first.
func runPrometheus(t *testing.T, bin string, port int) (*promServer, error) {
	t.Helper()
	p := &promServer{t: t, URL: fmt.Sprintf("http://127.0.0.1:%d", port), dir: t.TempDir()}
	conf := fmt.Sprintf("global:\n  scrape_interval: %[1]s\n  scrape_timeout: %[1]s\n  evaluation_interval: %[1]s\nscrape_configs:\n", promScrapeInterval)
	for _, job := range promJobs {
		p.Scrape(job)
		conf += fmt.Sprintf("  - job_name: %s\n    file_sd_configs:\n      - files: [%q]\n        refresh_interval: 1s\n", job, p.targets(job))
	}
	confPath := filepath.Join(p.dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(confPath, []byte(conf), 0o600))
	logPath := filepath.Join(p.dir, "prometheus.log")
	logf, err := os.Create(logPath)
	require.NoError(t, err)
	defer logf.Close()
	cmd := exec.Command(bin, "--config.file="+confPath, "--storage.tsdb.path="+filepath.Join(p.dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port), "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	logged := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logged())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			return nil, fmt.Errorf("prometheus exited: %w\n%s", err, logged())
		default:
		}
		if resp, err := promClient.Get(p.URL + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		require.True(t, time.Now().Before(deadline), "prometheus not ready after 20 s:\n%s", logged())
		time.Sleep(50 * time.Millisecond) // a poll's pace: /-/ready has no push
	}
}

// targets is the file_sd file of job.
func (p *promServer) targets(job string) string { return filepath.Join(p.dir, job+".json") }

// Scrape makes Prometheus scrape hosts (host:port, /metrics) as job,
// instead of the job's earlier targets. The file is replaced by a rename,
// as Prometheus asks, so it never reads half of one.
func (p *promServer) Scrape(job string, hosts ...string) {
	groups := []map[string]any{}
	if len(hosts) > 0 {
		groups = append(groups, map[string]any{"targets": hosts})
	}
	b, err := json.Marshal(groups)
	require.NoError(p.t, err)
	tmp := p.targets(job) + ".tmp"
	require.NoError(p.t, os.WriteFile(tmp, b, 0o600))
	require.NoError(p.t, os.Rename(tmp, p.targets(job)))
}

// promSeries is one series of a range query: its labels and values.
type promSeries struct {
	Metric map[string]string `json:"metric"`
	Values [][2]any          `json:"values"`
}

// finite reports whether the series has a value that is a number (not NaN or
// ±Inf, which a graph does not draw).
func (s promSeries) finite() bool {
	for _, v := range s.Values {
		str, _ := v[1].(string)
		if f, err := strconv.ParseFloat(str, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return true
		}
	}
	return false
}

// QueryRange evaluates expr from start to now at every scrape, as a Grafana
// panel does.
func (p *promServer) QueryRange(expr string, start time.Time) []promSeries {
	p.t.Helper()
	v := url.Values{"query": {expr}, "start": {unixString(start)}, "end": {unixString(time.Now())},
		"step": {promScrapeInterval.String()}}
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []promSeries `json:"result"`
		} `json:"data"`
	}
	p.get("/api/v1/query_range?"+v.Encode(), &out)
	require.Equal(p.t, "success", out.Status, "%s: %s", expr, out.Error)
	return out.Data.Result
}

// LabelValues is Grafana's label_values(selector, label): the values label
// takes in the series selector matches now.
func (p *promServer) LabelValues(selector, label string) []string {
	p.t.Helper()
	v := url.Values{"match[]": {selector}, "start": {unixString(time.Now().Add(-time.Hour))}}
	var out struct {
		Status string   `json:"status"`
		Data   []string `json:"data"`
	}
	p.get("/api/v1/label/"+label+"/values?"+v.Encode(), &out)
	require.Equal(p.t, "success", out.Status)
	return out.Data
}

func (p *promServer) get(path string, into any) {
	p.t.Helper()
	resp, err := promClient.Get(p.URL + path)
	require.NoError(p.t, err)
	defer resp.Body.Close()
	require.NoError(p.t, json.NewDecoder(resp.Body).Decode(into))
}

func unixString(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}
