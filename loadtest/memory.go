package loadtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// memoryWatch scrapes process_resident_memory_bytes from each process's
// /metrics twice a second and keeps the peak, in MiB.
type memoryWatch struct {
	mu     sync.Mutex
	peaks  map[string]float64
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func watchMemory(ctx context.Context, urls map[string]string) *memoryWatch {
	ctx, cancel := context.WithCancel(ctx)
	m := &memoryWatch{peaks: map[string]float64{}, cancel: cancel}
	hc := &http.Client{Timeout: 2 * time.Second}
	for name, url := range urls {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			t := time.NewTicker(500 * time.Millisecond)
			defer t.Stop()
			for {
				if v, err := scrapeValue(ctx, hc, url, "process_resident_memory_bytes"); err == nil {
					m.mu.Lock()
					m.peaks[name] = max(m.peaks[name], v/(1<<20))
					m.mu.Unlock()
				}
				select {
				case <-t.C:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	return m
}

func (m *memoryWatch) stop() map[string]float64 {
	m.cancel()
	m.wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]float64{}
	for k, v := range m.peaks {
		out[k] = round(v, 1)
	}
	return out
}

// scrapeValue reads one unlabelled sample, such as the process collector's
// process_resident_memory_bytes, from a Prometheus text exposition.
func scrapeValue(ctx context.Context, hc *http.Client, url, name string) (float64, error) {
	vs, err := scrapeValues(ctx, hc, url, name)
	return vs[name], err
}

// scrapeValues reads unlabelled samples from one scrape of a Prometheus
// text exposition. A name not in it is an error (errNoSample), with the
// values of the others still returned.
func scrapeValues(ctx context.Context, hc *http.Client, url string, names ...string) (map[string]float64, error) {
	out := make(map[string]float64, len(names))
	err := scrapeLines(ctx, hc, url, func(line string) (bool, error) {
		for _, name := range names {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return false, fmt.Errorf("%s at %s: %w", name, url, err)
				}
				out[name] = f
			}
		}
		return len(out) < len(names), nil
	})
	if err != nil {
		return out, err
	}
	for _, name := range names {
		if _, ok := out[name]; !ok {
			return out, fmt.Errorf("%w: %s at %s", errNoSample, name, url)
		}
	}
	return out, nil
}

// scrapeSum is the sum of every series of metric name in one scrape,
// labelled or not, such as a histogram's _count over its queues; 0 when
// it has none yet.
func scrapeSum(ctx context.Context, hc *http.Client, url, name string) (float64, error) {
	sum := 0.0
	err := scrapeLines(ctx, hc, url, func(line string) (bool, error) {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			return true, nil
		}
		f, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
		if err != nil {
			return false, fmt.Errorf("%s at %s: %w", name, url, err)
		}
		sum += f
		return true, nil
	})
	return sum, err
}

// scrapeLines hands each line of one scrape of url to f until f says it
// wants no more or fails.
func scrapeLines(ctx context.Context, hc *http.Client, url string, f func(line string) (more bool, err error)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		more, err := f(sc.Text())
		if err != nil || !more {
			return err
		}
	}
	return sc.Err()
}

var errNoSample = errors.New("sample not in the exposition")
