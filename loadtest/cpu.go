package loadtest

import (
	"context"
	"net/http"
	"time"

	"github.com/holdfast/holdfast/internal/cputime"
)

// CPU parts of a run, as keys of Report.CPUSeconds.
const (
	CPUTotal    = "total"     // every core's busy time on the machine
	CPULoadTool = "load tool" // this process
	CPUPostgres = "postgres"  // every postgres process on the machine
	CPURedis    = "redis"     // every redis-server process on the machine
	// CPURest is total minus the parts measured on their own: anything else
	// that ran, which is why make bench wants a quiet machine.
	CPURest = "rest"
)

// servers are the command names whose processes are summed as a part.
var servers = map[string]string{"postgres": CPUPostgres, "redis-server": CPURedis}

// cpuMeter measures the CPU a run costs: the machine's busy time, the load
// tool's own, and each holdfast process's process_cpu_seconds_total.
type cpuMeter struct {
	urls    map[string]string
	hc      *http.Client
	start   cputime.Sample
	procs   map[string]float64
	servers map[string]float64
	ok      bool
}

func startCPU(ctx context.Context, urls map[string]string) *cpuMeter {
	m := &cpuMeter{urls: urls, hc: &http.Client{Timeout: 2 * time.Second}}
	var err error
	if m.start, err = cputime.Now(); err != nil {
		return m // not Linux: the report has no CPU figures
	}
	m.ok, m.procs, m.servers = true, m.scrape(ctx), serverCPU()
	return m
}

// serverCPU is the CPU seconds of the database servers so far, by part.
func serverCPU() map[string]float64 {
	names := make([]string, 0, len(servers))
	for n := range servers {
		names = append(names, n)
	}
	by, err := cputime.ByName(names...)
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	for n, v := range by {
		out[servers[n]] = v
	}
	return out
}

func (m *cpuMeter) scrape(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	for name, url := range m.urls {
		if v, err := scrapeValue(ctx, m.hc, url, "process_cpu_seconds_total"); err == nil {
			out[name] = v
		}
	}
	return out
}

// stop returns CPU seconds per part since startCPU; nil when they could not
// be read.
func (m *cpuMeter) stop(ctx context.Context) map[string]float64 {
	if !m.ok {
		return nil
	}
	d, err := m.start.Since()
	if err != nil {
		return nil
	}
	out := map[string]float64{CPUTotal: round(d.Machine, 2), CPULoadTool: round(d.Self, 2)}
	rest := d.Machine - d.Self
	for name, v := range m.scrape(ctx) {
		if was, ok := m.procs[name]; ok {
			out[name] = round(v-was, 2)
			rest -= v - was
		}
	}
	for part, v := range serverCPU() {
		if was, ok := m.servers[part]; ok {
			out[part] = round(v-was, 2)
			rest -= v - was
		}
	}
	out[CPURest] = round(max(rest, 0), 2)
	return out
}
