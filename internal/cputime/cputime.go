// Package cputime measures where CPU time goes during a benchmark run: the
// whole machine's busy time and the calling process's own, read from /proc.
// make bench divides them by the requests served to show what one request
// costs and so how many the machine's cores can serve at most.
package cputime

import (
	"fmt"

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

// ByName sums the CPU seconds of every running process whose command name
// is one of names (such as "postgres", "redis-server"), per name. A process
// that exits between two readings takes its time with it, so the figures
// suit long-lived servers.
func ByName(names ...string) (map[string]float64, error) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return nil, fmt.Errorf("cputime: list processes: %w", err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil || !want[st.Comm] {
			continue // gone meanwhile, or not one of ours
		}
		out[st.Comm] += st.CPUTime()
	}
	return out, nil
}
