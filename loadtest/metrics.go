package loadtest

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/holdfast/holdfast/internal/cputime"
)

// Process metrics the tool reads from each process's /metrics.
const (
	metricRSS  = "process_resident_memory_bytes"
	metricHeap = "go_memstats_heap_inuse_bytes"
	metricCPU  = "process_cpu_seconds_total"
)

// scrape reads names from one scrape of url's Prometheus text exposition,
// each the sum of its series whatever their labels (a histogram's _count
// over its queues); a name with no series is left out. A metric whose name
// only begins with one of names is not counted.
func scrape(ctx context.Context, hc *http.Client, url string, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		for _, name := range names {
			rest, ok := strings.CutPrefix(sc.Text(), name)
			if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
				continue
			}
			f, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
			if err != nil {
				return nil, fmt.Errorf("%s at %s: %w", name, url, err)
			}
			out[name] += f
		}
	}
	return out, sc.Err()
}

// scrapeOne reads one metric; one not in the exposition is an error.
func scrapeOne(ctx context.Context, hc *http.Client, url, name string) (float64, error) {
	vs, err := scrape(ctx, hc, url, name)
	v, ok := vs[name]
	if err == nil && !ok {
		err = fmt.Errorf("%s not at %s", name, url)
	}
	return v, err
}

// mib is bytes in MiB, to a tenth.
func mib(bytes float64) float64 { return round(bytes/(1<<20), 1) }

// watchMemory scrapes each process's resident memory twice a second until
// the returned stop, which gives the peak of each in MiB.
func watchMemory(ctx context.Context, urls map[string]string) (stop func() map[string]float64) {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	var wg sync.WaitGroup
	peaks := map[string]float64{}
	hc := &http.Client{Timeout: 2 * time.Second}
	for name, url := range urls {
		wg.Go(func() {
			t := time.NewTicker(500 * time.Millisecond)
			defer t.Stop()
			for {
				if v, err := scrapeOne(ctx, hc, url, metricRSS); err == nil {
					mu.Lock()
					peaks[name] = max(peaks[name], mib(v))
					mu.Unlock()
				}
				select {
				case <-t.C:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	return func() map[string]float64 {
		cancel()
		wg.Wait()
		return peaks
	}
}

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
	c.m = cputime.Start(CPULoadTool, map[string]string{"postgres": CPUPostgres, "redis-server": CPURedis})
	return c
}

// scrape returns each process's cumulative CPU seconds. A process that
// cannot be read is left out, and its time falls to the rest.
func (c *cpuMeter) scrape(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	for name, url := range c.urls {
		if v, err := scrapeOne(ctx, c.hc, url, metricCPU); err == nil {
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
