package loadtest

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// progress draws a bar of finished journeys, redrawn a few times a second,
// only when w is a terminal (a pipe or file gets nothing).
type progress struct {
	w     io.Writer
	name  string
	total int
	done  atomic.Int64
	start time.Time
	stop  chan struct{}
	wg    sync.WaitGroup
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newProgress(w io.Writer, name string, total int) *progress {
	p := &progress{name: name, total: total, start: time.Now(), stop: make(chan struct{})}
	if w == nil || !isTerminal(w) {
		return p
	}
	p.w = w
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.draw()
			case <-p.stop:
				p.draw()
				fmt.Fprintln(p.w)
				return
			}
		}
	}()
	return p
}

// Step counts one finished journey.
func (p *progress) Step() { p.done.Add(1) }

// Done stops drawing.
func (p *progress) Done() {
	close(p.stop)
	p.wg.Wait()
}

func (p *progress) draw() {
	const width = 40
	done := int(p.done.Load())
	frac := 1.0
	if p.total > 0 {
		frac = float64(done) / float64(p.total)
	}
	n := int(frac * width)
	rate := float64(done) / max(time.Since(p.start).Seconds(), 0.001)
	fmt.Fprintf(p.w, "\r%s [%s%s] %d/%d  %.0f/s ", p.name, strings.Repeat("#", n), strings.Repeat(".", width-n), done, p.total, rate)
}
