// Package cputime measures where CPU time goes during a benchmark run: the
// whole machine's busy time and the calling process's own, read from /proc.
// make bench divides them by the requests served to show what one request
// costs and so how many the machine's cores can serve at most.
package cputime

import (
	"fmt"
	"math"

	"github.com/prometheus/procfs"
)

// Sample is cumulative CPU seconds at one instant.
type Sample struct {
	// Machine is the busy time of all cores: user, nice, system and
	// interrupt time; idle, I/O wait and time stolen by a hypervisor are
	// not work done here.
	Machine float64
	// Self is this process's user and system time.
	Self float64
}

// Now reads both counters.
func Now() (Sample, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return Sample{}, fmt.Errorf("cputime: %w", err)
	}
	st, err := fs.Stat()
	if err != nil {
		return Sample{}, fmt.Errorf("cputime: /proc/stat: %w", err)
	}
	self, err := fs.Self()
	if err != nil {
		return Sample{}, fmt.Errorf("cputime: /proc/self: %w", err)
	}
	ps, err := self.Stat()
	if err != nil {
		return Sample{}, fmt.Errorf("cputime: /proc/self/stat: %w", err)
	}
	c := st.CPUTotal
	return Sample{Machine: c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ, Self: ps.CPUTime()}, nil
}

// Since is the CPU spent from s until now.
func (s Sample) Since() (Sample, error) {
	now, err := Now()
	if err != nil {
		return Sample{}, err
	}
	return Sample{Machine: now.Machine - s.Machine, Self: now.Self - s.Self}, nil
}

// proc is one running process: its command name and CPU seconds so far.
type proc struct {
	Name    string
	Seconds float64
}

// procID tells processes apart even when the kernel reuses a pid.
type procID struct {
	pid   int
	start uint64 // clock ticks after boot
}

// procs reads every running process whose command name is one of names
// (such as "postgres", "redis-server").
func procs(names ...string) (map[procID]proc, error) {
	all, err := procfs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("cputime: list processes: %w", err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[procID]proc{}
	for _, p := range all {
		st, err := p.Stat()
		if err != nil || !want[st.Comm] {
			continue // gone meanwhile, or not one of ours
		}
		out[procID{p.PID, st.Starttime}] = proc{st.Comm, st.CPUTime()}
	}
	return out, nil
}

// spent sums, per command name, the CPU seconds the processes in now spent
// since was was read: all of a process's time if it started since, none of
// a process that exited meanwhile (its time is gone with it, so the figures
// suit long-lived servers). A name with a process in either reading is
// present, even at zero.
func spent(was, now map[procID]proc) map[string]float64 {
	out := map[string]float64{}
	for id, p := range now {
		out[p.Name] += p.Seconds - was[id].Seconds
	}
	for _, p := range was {
		out[p.Name] += 0
	}
	return out
}

// Part names every Meter reports.
const (
	Total = "total" // every core's busy time on the machine
	Rest  = "rest"  // Total minus every part measured on its own
)

// A Meter measures what one phase of a benchmark costs, by part: the
// machine's busy time (Total), the calling process's own time, the named
// server processes, any parts the caller measures itself, and the Rest.
type Meter struct {
	self    string            // part name of the calling process
	servers map[string]string // command name → part name
	start   Sample
	was     map[procID]proc // the servers at the start
	ok      bool
}

// Start begins measuring. self names the calling process's part; servers
// maps command names (such as "redis-server") to part names. Where /proc
// cannot be read, Stop reports nothing.
func Start(self string, servers map[string]string) *Meter {
	m := &Meter{self: self, servers: servers}
	var err error
	if m.start, err = Now(); err != nil {
		return m
	}
	if m.was, err = procs(m.names()...); err != nil {
		m.was = nil // servers unread: Stop leaves them out
	}
	m.ok = true
	return m
}

func (m *Meter) names() []string {
	names := make([]string, 0, len(m.servers))
	for n := range m.servers {
		names = append(names, n)
	}
	return names
}

// Stop returns the CPU seconds of each part since Start, rounded to 1/100 s;
// own adds the parts the caller measured itself (such as processes read
// through their metrics). A server that could not be read is left out, and
// its time falls to the Rest, as does the time of a server process that
// exited before Stop. It returns nil when /proc could not be read.
func (m *Meter) Stop(own map[string]float64) map[string]float64 {
	if !m.ok {
		return nil
	}
	d, err := m.start.Since()
	if err != nil {
		return nil
	}
	out := map[string]float64{Total: round2(d.Machine), m.self: round2(d.Self)}
	rest := d.Machine - d.Self
	if now, err := procs(m.names()...); err == nil && m.was != nil {
		byName := spent(m.was, now)
		for name, part := range m.servers {
			if v, ok := byName[name]; ok {
				out[part] = round2(v)
				rest -= v
			}
		}
	}
	for part, v := range own {
		out[part] = round2(v)
		rest -= v
	}
	out[Rest] = round2(max(rest, 0))
	return out
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }
