package lincheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
)

// spy is a testing.TB that keeps what Check reports instead of failing.
type spy struct {
	testing.TB
	mu         sync.Mutex
	errs, logs []string
}

func (s *spy) Helper() {}
func (s *spy) Errorf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
}
func (s *spy) Logf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logs = append(s.logs, fmt.Sprintf(format, args...))
}

// Check logs the count and verdict of a good history and fails nothing.
func TestCheckLogsTheVerdict(t *testing.T) {
	h := newHistory()
	h.op(0, ev, 0, 10, Grab{"u1"}, OK(int64(11))).op(0, "events:8", 0, 10, Grab{"u1"}, OK(int64(21)))
	s := &spy{TB: t}
	h.rec.Check(s, FCFS(map[string][]int64{ev: {11}, "events:8": {21}}), "fcfs")
	require.Empty(t, s.errs)
	require.Len(t, s.logs, 1)
	require.Regexp(t, `^fcfs: operations checked: 2 on 2 keys, verdict: ok \(`, s.logs[0])
}

// A history no order explains fails the test, names the key, the state
// reached and the operations that no order could place next, with their
// request ids, and writes Porcupine's visualization.
func TestCheckNamesTheOperationsAndWritesTheVisualization(t *testing.T) {
	h := newHistory()
	g := func(seat int64, id string) Outcome {
		o := OK(seat)
		o.RequestID = id
		return o
	}
	h.op(0, ev, 0, 10, Grab{"u1"}, g(11, "req-a")).
		op(1, ev, 20, 30, Grab{"u2"}, g(11, "req-b")).      // seat 11 again
		op(0, "events:8", 0, 10, Grab{"u1"}, OK(int64(21))) // a good key beside it
	s := &spy{TB: t}
	h.rec.Check(s, FCFS(map[string][]int64{ev: {11, 12}, "events:8": {21}}), "fcfs")
	require.Len(t, s.errs, 1)
	msg := s.errs[0]
	t.Log(msg)
	require.Contains(t, msg, "fcfs: operations checked: 3 on 2 keys, verdict: NOT LINEARIZABLE")
	require.Contains(t, msg, "key events:7: 1 of its 2 operations explained in some order, leaving 1 of 2 seats given, next 12")
	require.Contains(t, msg, "client 1: u2 grabs → 11, sent 09:00:00.020000, answered 09:00:00.030000, request req-b")
	require.NotContains(t, msg, "events:8:", "the key that checks is not named")
	path := regexp.MustCompile(`visualization: (\S+\.html)`).FindStringSubmatch(msg)
	require.NotNil(t, path, msg)
	page, err := os.ReadFile(path[1])
	require.NoError(t, err)
	require.Contains(t, string(page), "u2 grabs")
	hist, err := os.ReadFile(strings.TrimSuffix(path[1], ".html") + ".txt")
	require.NoError(t, err)
	require.Equal(t, "key events:7, 2 operations in the order they were sent:\n"+
		"  client 0: u1 grabs → 11, sent 09:00:00.000000, answered 09:00:00.010000, request req-a\n"+
		"  client 1: u2 grabs → 11, sent 09:00:00.020000, answered 09:00:00.030000, request req-b\n", string(hist))
	require.Contains(t, msg, "history: "+strings.TrimSuffix(path[1], ".html")+".txt")
	if dir := filepath.Dir(path[1]); strings.HasPrefix(filepath.Base(dir), "lincheck-") {
		require.NoError(t, os.RemoveAll(dir))
	}
}

// A check that does not end within the recorder's timeout fails the test:
// an unknown verdict is not a pass. Thirty concurrent reserves whose
// outcomes were never learnt, and a read no subset of them explains, make
// the search try every subset.
func TestCheckFailsWhenItTimesOut(t *testing.T) {
	h := newHistory()
	for i := range 30 {
		h.op(i, opt, 0, 0, Reserve{fmt.Sprintf("u%02d", i), 1}, Unknown())
	}
	h.op(30, opt, 10, 20, ReadStock{}, level(100, 31))
	h.rec.Timeout = 200 * time.Millisecond
	s := &spy{TB: t}
	h.rec.Check(s, Stock(map[string]int{opt: 100}), "stock")
	require.Len(t, s.errs, 1)
	require.Contains(t, s.errs[0], "stock: operations checked: 31 on 1 keys, verdict: unknown: the check did not end within 200ms")
}

// Outcomes read as their codes in reports.
func TestOutcomeStrings(t *testing.T) {
	require.Equal(t, "SOLD_OUT", Refused(domain.CodeSoldOut, nil).String())
	require.Equal(t, "ALREADY_RESERVED(11)", Refused(domain.CodeAlreadyReserved, int64(11)).String())
	require.Equal(t, "not accepted UNAVAILABLE", NotAccepted(domain.CodeUnavailable).String())
	require.Equal(t, "unknown", Unknown().String())
}
