package lincheck

import (
	"cmp"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Status is what a client learnt of an operation.
type Status string

// The statuses an Outcome may carry.
const (
	// StatusOK: the operation was applied (succeeded); Value is what it returned.
	StatusOK Status = "ok"
	// StatusRefused: a business "no" (rejected, or a read's negative
	// answer) with Code; Value is whatever the refusal named (a seat id, a
	// rank). A refusal has no effect.
	StatusRefused Status = "refused"
	// StatusNotAccepted: the write was answered 4xx or 5xx before it was
	// accepted (503, 429, a 409 at the API...). It has no effect: SPEC §2
	// (a write is accepted only once durable) and docs/operations.md (a
	// 503 write was not stored).
	StatusNotAccepted Status = "not-accepted"
	// StatusFailed: accepted, then failed after retries (INTERNAL). Its
	// transaction rolled back: no effect.
	StatusFailed Status = "failed"
	// StatusUnknown: the client never learnt the outcome (a transport
	// error, a poll that ran out). It may or may not have taken effect: it
	// is checked as an operation that never returned.
	StatusUnknown Status = "unknown"
)

// Outcome is what a client learnt of one operation.
type Outcome struct {
	Status    Status
	Code      string // a refusal's or a non-acceptance's error code
	Value     any    // the model's reading of the answer (see each model)
	RequestID string // the request's id, shown in reports
}

// OK is an applied operation that returned v.
func OK(v any) Outcome { return Outcome{Status: StatusOK, Value: v} }

// Refused is a business refusal with code, naming v (or nil).
func Refused(code string, v any) Outcome { return Outcome{Status: StatusRefused, Code: code, Value: v} }

// NotAccepted is a write the API did not accept, with its error code.
func NotAccepted(code string) Outcome { return Outcome{Status: StatusNotAccepted, Code: code} }

// Unknown is an operation whose outcome the client never learnt.
func Unknown() Outcome { return Outcome{Status: StatusUnknown} }

func (o Outcome) String() string {
	switch o.Status {
	case StatusOK:
		return fmt.Sprintf("%v", o.Value)
	case StatusRefused:
		if o.Value != nil {
			return fmt.Sprintf("%s(%v)", o.Code, o.Value)
		}
		return o.Code
	case StatusNotAccepted:
		return "not accepted " + o.Code
	}
	return string(o.Status)
}

// Call is an operation's input as a model's step sees it: the key it acts
// on, what it asked, and when the client sent it and learnt the answer
// (the far future for an unknown outcome).
type Call struct {
	Key          string
	Op           any
	Sent, Learnt time.Time
}

// never is the return time of an operation whose outcome is unknown.
const never = math.MaxInt64

// Recorder collects a run's operations, safe for concurrent use.
type Recorder struct {
	// Timeout bounds one Check (default 30 s); a check that does not end
	// in time fails its test, as an unknown verdict.
	Timeout time.Duration

	mu  sync.Mutex
	ops []porcupine.Operation
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{Timeout: 30 * time.Second} }

// Record adds an operation the client of index client (0, 1, …: one per
// concurrent client, for the visualization) sent at sent and whose outcome
// it learnt just now.
func (r *Recorder) Record(client int, key string, sent time.Time, op any, out Outcome) {
	r.RecordAt(client, key, sent, time.Now(), op, out)
}

// RecordAt is Record with the time the outcome was learnt given (a
// hand-made history). An unknown outcome's time is ignored: it never
// returned.
func (r *Recorder) RecordAt(client int, key string, sent, learnt time.Time, op any, out Outcome) {
	ret := learnt.UnixNano()
	if out.Status == StatusUnknown {
		ret, learnt = never, time.Unix(0, never)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// Wall-clock readings only (Round(0)), as Porcupine's order and the
	// times the system reports are.
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Call: sent.UnixNano(), Return: ret,
		Input: Call{Key: key, Op: op, Sent: sent.Round(0), Learnt: learnt.Round(0)}, Output: out, Metadata: out.RequestID})
}

// Len is the number of operations recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Operations returns a copy of the history.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// Verdict checks the history against m and returns Porcupine's result
// (Ok, Illegal, or Unknown when the check outlasted r.Timeout), without
// failing anything: the controls' entry point.
func (r *Recorder) Verdict(m porcupine.Model) porcupine.CheckResult {
	return porcupine.CheckOperationsTimeout(m, r.Operations(), r.Timeout)
}

// Check checks the history against m, each key on its own (the model's
// partition), and logs "name: operations checked: N, verdict: ok". A
// history that no sequential order explains fails t, naming the first
// operations no order could place and writing Porcupine's visualization
// to an HTML file; a check that does not end within r.Timeout fails t too.
func (r *Recorder) Check(t testing.TB, m porcupine.Model, name string) {
	t.Helper()
	ops := r.Operations()
	began := time.Now()
	res := porcupine.CheckOperationsTimeout(m, ops, r.Timeout)
	took := time.Since(began).Round(time.Millisecond)
	keys := len(m.Partition(ops))
	switch res {
	case porcupine.Ok:
		t.Logf("%s: operations checked: %d on %d keys, verdict: ok (%s)", name, len(ops), keys, took)
		return
	case porcupine.Unknown:
		t.Errorf("%s: operations checked: %d on %d keys, verdict: unknown: the check did not end within %s; "+
			"record a shorter history or fewer concurrent clients per key", name, len(ops), keys, r.Timeout)
		return
	}
	_, info := porcupine.CheckOperationsVerbose(m, ops, r.Timeout)
	why, failed := explain(m, ops, info)
	dir, err := outputDir(t)
	files := "not written: " + fmt.Sprint(err)
	if err == nil {
		files = write(m, info, failed, filepath.Join(dir, fileName(t.Name()+"-"+name)))
	}
	t.Errorf("%s: operations checked: %d on %d keys, verdict: NOT LINEARIZABLE (%s)\n%s\n%s",
		name, len(ops), keys, took, why, files)
}

// outputDir is the test's artifact directory when go test runs with
// -artifacts, else a directory of its own under os.TempDir that outlives
// the test.
func outputDir(t testing.TB) (string, error) {
	if f := flag.Lookup("test.artifacts"); f != nil && f.Value.String() == "true" {
		return t.ArtifactDir(), nil
	}
	return os.MkdirTemp("", "lincheck-")
}

// write writes Porcupine's HTML view of info to base.html, and every
// operation of the keys that failed, in the order they were sent, to
// base.txt; it says where.
func write(m porcupine.Model, info porcupine.LinearizationInfo, failed [][]porcupine.Operation, base string) string {
	var out []string
	if err := porcupine.VisualizePath(m, info, base+".html"); err != nil {
		out = append(out, "visualization not written: "+err.Error())
	} else {
		out = append(out, "visualization: "+base+".html")
	}
	var b strings.Builder
	for _, ops := range failed {
		ops = slices.Clone(ops)
		slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		fmt.Fprintf(&b, "key %s, %d operations in the order they were sent:\n", ops[0].Input.(Call).Key, len(ops))
		for _, op := range ops {
			fmt.Fprintf(&b, "  %s\n", describe(m, op))
		}
	}
	if err := os.WriteFile(base+".txt", []byte(b.String()), 0o644); err != nil {
		out = append(out, "history not written: "+err.Error())
	} else {
		out = append(out, "history: "+base+".txt")
	}
	return strings.Join(out, "\n")
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func fileName(s string) string { return unsafeName.ReplaceAllString(s, "_") }

// explain names, for each key whose history no order explains, the state
// its longest explained prefix reached and the operations that could come
// next in real time, none of which the model accepts there. Porcupine
// numbers a partition's operations by their index in it, and partitions
// as m.Partition does, so parts lines up with info.
func explain(m porcupine.Model, ops []porcupine.Operation, info porcupine.LinearizationInfo) (string, [][]porcupine.Operation) {
	var b strings.Builder
	var failed [][]porcupine.Operation
	parts := m.Partition(ops)
	for p, partials := range info.PartialLinearizations() {
		all := parts[p]
		var longest []int
		for _, l := range partials {
			if len(l) > len(longest) {
				longest = l
			}
		}
		if len(longest) == len(all) {
			continue
		}
		failed = append(failed, all)
		state := m.Init()
		for _, id := range longest {
			_, state = m.Step(state, all[id].Input, all[id].Output)
		}
		fmt.Fprintf(&b, "key %s: %d of its %d operations explained in some order, leaving %s; "+
			"none of these, which real time lets come next, fits there:\n",
			all[0].Input.(Call).Key, len(longest), len(all), describeState(m, state))
		for _, op := range frontier(all, longest) {
			fmt.Fprintf(&b, "  %s\n", describe(m, op))
		}
	}
	return strings.TrimRight(b.String(), "\n"), failed
}

// frontier is the operations of all not in placed that real time allows
// next: those sent before the earliest answer among the unplaced ones.
func frontier(all []porcupine.Operation, placed []int) []porcupine.Operation {
	in := make([]bool, len(all))
	for _, id := range placed {
		in[id] = true
	}
	first := int64(never)
	for i, op := range all {
		if !in[i] {
			first = min(first, op.Return)
		}
	}
	var next []porcupine.Operation
	for i, op := range all {
		if !in[i] && op.Call <= first {
			next = append(next, op)
		}
	}
	return next
}

func describe(m porcupine.Model, op porcupine.Operation) string {
	c := op.Input.(Call)
	s := fmt.Sprintf("client %d: %s, sent %s", op.ClientId, m.DescribeOperation(op.Input, op.Output),
		c.Sent.UTC().Format("15:04:05.000000"))
	if op.Return != never {
		s += ", answered " + c.Learnt.UTC().Format("15:04:05.000000")
	}
	if id, _ := op.Metadata.(string); id != "" {
		s += ", request " + id
	}
	return s
}

func describeState(m porcupine.Model, s any) string {
	if m.DescribeState == nil {
		return fmt.Sprintf("%v", s)
	}
	return m.DescribeState(s)
}
