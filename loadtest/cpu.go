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
// tool's own, each holdfast process's process_cpu_seconds_total and the
// database servers'.
type cpuMeter struct {
	urls  map[string]string
	hc    *http.Client
	start cputime.Sample
	parts map[string]float64 // cumulative CPU seconds per part at the start
	ok    bool
}

func startCPU(ctx context.Context, urls map[string]string) *cpuMeter {
	m := &cpuMeter{urls: urls, hc: &http.Client{Timeout: 2 * time.Second}}
	var err error
	if m.start, err = cputime.Now(); err != nil {
		return m // not Linux: the report has no CPU figures
	}
	m.ok, m.parts = true, m.read(ctx)
	return m
}

// read returns the cumulative CPU seconds of every part measured on its own:
// the scraped processes and the database servers. A part that cannot be read
// is left out, and its time falls to the rest.
func (m *cpuMeter) read(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	for name, url := range m.urls {
		if v, err := scrapeValue(ctx, m.hc, url, "process_cpu_seconds_total"); err == nil {
			out[name] = v
		}
	}
	names := make([]string, 0, len(servers))
	for n := range servers {
		names = append(names, n)
	}
	if by, err := cputime.ByName(names...); err == nil {
		for n, v := range by {
			out[servers[n]] = v
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
	for part, v := range m.read(ctx) {
		if was, ok := m.parts[part]; ok {
			out[part] = round(v-was, 2)
			rest -= v - was
		}
	}
	out[CPURest] = round(max(rest, 0), 2)
	return out
}
