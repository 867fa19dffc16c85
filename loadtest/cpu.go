package loadtest

import (
	"context"
	"net/http"
	"time"

	"github.com/holdfast/holdfast/internal/cputime"
)

// CPU parts of a run, as keys of Report.CPUSeconds.
const (
	CPUTotal    = cputime.Total // every core's busy time on the machine
	CPULoadTool = "load tool"   // this process
	CPUPostgres = "postgres"    // every postgres process on the machine
	CPURedis    = "redis"       // every redis-server process on the machine
	// CPURest is total minus the parts measured on their own: anything else
	// that ran, which is why make bench wants a quiet machine.
	CPURest = cputime.Rest
)

// servers are the command names whose processes are summed as a part.
var servers = map[string]string{"postgres": CPUPostgres, "redis-server": CPURedis}

// cpuMeter measures the CPU a run costs: cputime's parts (the machine, the
// load tool, the database servers) and each holdfast process's
// process_cpu_seconds_total, read from its /metrics.
type cpuMeter struct {
	urls  map[string]string
	hc    *http.Client
	m     *cputime.Meter
	start map[string]float64 // scraped CPU seconds per process at the start
}

func startCPU(ctx context.Context, urls map[string]string) *cpuMeter {
	c := &cpuMeter{urls: urls, hc: &http.Client{Timeout: 2 * time.Second}}
	c.start = c.scrape(ctx)
	c.m = cputime.Start(CPULoadTool, servers)
	return c
}

// scrape returns each process's cumulative CPU seconds. A process that
// cannot be read is left out, and its time falls to the rest.
func (c *cpuMeter) scrape(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	for name, url := range c.urls {
		if v, err := scrapeValue(ctx, c.hc, url, "process_cpu_seconds_total"); err == nil {
			out[name] = v
		}
	}
	return out
}

// read returns CPU seconds per part since startCPU; nil when they could not
// be read. The meter runs on: a later read covers the time since the start
// again, so one meter gives a run and any phase that began with it.
func (c *cpuMeter) read(ctx context.Context) map[string]float64 {
	own := map[string]float64{}
	for name, v := range c.scrape(ctx) {
		if was, ok := c.start[name]; ok {
			own[name] = v - was
		}
	}
	return c.m.Stop(own)
}
