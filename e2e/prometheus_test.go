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
)

// promServer is a private Prometheus server (the real one, Debian package
// prometheus) that scrapes a test's API and workers every second, with the
// job names of dashboards/prometheus.yml.
type promServer struct {
	t       *testing.T
	URL     string
	workers string // file_sd file of the holdfast-worker job
}

// promScrapeInterval is how often the private Prometheus scrapes.
const promScrapeInterval = time.Second

// startPrometheus starts Prometheus on port, scraping the API at apiHost
// (host:port) as job holdfast-api; workers join with AddWorker. It is
// stopped when the test ends.
func startPrometheus(t *testing.T, port int, apiHost string) *promServer {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	require.NoError(t, err, "prometheus not found: apt-get install prometheus (.ci/run does)")
	dir := t.TempDir()
	p := &promServer{t: t, URL: fmt.Sprintf("http://127.0.0.1:%d", port), workers: filepath.Join(dir, "workers.json")}
	p.writeWorkers(nil)
	conf := fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
  evaluation_interval: %[1]s
scrape_configs:
  - job_name: holdfast-api
    static_configs:
      - targets: [%[2]q]
  - job_name: holdfast-worker
    file_sd_configs:
      - files: [%[3]q]
        refresh_interval: 1s
`, promScrapeInterval, apiHost, p.workers)
	confPath := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(confPath, []byte(conf), 0o600))
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	require.NoError(t, err)
	cmd := exec.Command(bin, "--config.file="+confPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port), "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("prometheus log:\n%s", b)
			}
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-exited:
			b, _ := os.ReadFile(logf.Name())
			require.FailNow(t, "prometheus exited", "%v\n%s", err, b)
		default:
		}
		if resp, err := http.Get(p.URL + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		require.True(t, time.Now().Before(deadline), "prometheus not ready after 20 s")
		time.Sleep(50 * time.Millisecond)
	}
}

// AddWorker makes Prometheus scrape the workers at hosts (host:port) as job
// holdfast-worker.
func (p *promServer) AddWorker(hosts ...string) { p.writeWorkers(hosts) }

// writeWorkers replaces the file_sd file by renaming, as Prometheus asks, so
// it never reads half a file.
func (p *promServer) writeWorkers(hosts []string) {
	groups := []map[string]any{}
	if len(hosts) > 0 {
		groups = append(groups, map[string]any{"targets": hosts})
	}
	b, err := json.Marshal(groups)
	require.NoError(p.t, err)
	tmp := p.workers + ".tmp"
	require.NoError(p.t, os.WriteFile(tmp, b, 0o600))
	require.NoError(p.t, os.Rename(tmp, p.workers))
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
	resp, err := http.Get(p.URL + path)
	require.NoError(p.t, err)
	defer resp.Body.Close()
	require.NoError(p.t, json.NewDecoder(resp.Body).Decode(into))
}

func unixString(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}
