package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/holdfast/holdfast/bench/floor"
	"github.com/holdfast/holdfast/loadtest"
)

// floorCmd measures raw Asynq (enqueue + no-op processing) on REDIS_URL and
// prints the result as JSON.
func floorCmd(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("floor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opt floor.Options
	fs.StringVar(&opt.RedisURL, "redis", envOr("REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL (REDIS_URL)")
	fs.IntVar(&opt.Tasks, "tasks", 40000, "no-op tasks to enqueue and process")
	fs.IntVar(&opt.Concurrency, "concurrency", 64, "Asynq server concurrency (holdfast's worker default)")
	if err := fs.Parse(args); err != nil {
		return 2, nil
	}
	res, err := floor.Run(ctx, opt)
	if err != nil {
		return 1, err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return 0, enc.Encode(res)
}

// tableCmd reads a make bench directory and prints the comparison table:
// machine.txt and the JSON files of the parts measured (floor.json,
// lean.json, rush.json and intake.json; drop-, cart- and hold-baseline.json
// with drop-rush.json, cart-rush.json and hold-storm.json; group-baseline.json
// with group-rush.json; isolation.json, recovery.json), commit-delay-us.txt,
// and the runs at a commit delay in its subdirectory commit-delay. It exits
// 1 when a target is not met.
func tableCmd(args []string, stdout io.Writer) (int, error) {
	if len(args) != 1 {
		return 2, fmt.Errorf("usage: load table DIR")
	}
	dir := args[0]
	machine, err := os.ReadFile(filepath.Join(dir, "machine.txt"))
	if err != nil {
		return 1, err
	}
	b, err := readBench(dir)
	if err != nil {
		return 1, err
	}
	b.Machine = strings.TrimSpace(string(machine))
	b.Cores = runtime.NumCPU() // the table is made on the machine that ran the bench
	if exists(dir, delayedDir) {
		if b.Delayed, err = readBench(filepath.Join(dir, delayedDir)); err != nil {
			return 1, err
		}
	}
	if b.Rush == nil && (b.DropRush == nil || b.DropBaseline == nil) && (b.CartRush == nil || b.CartBaseline == nil) &&
		(b.HoldStorm == nil || b.HoldBaseline == nil) && (b.GroupRush == nil || b.GroupBaseline == nil) && b.Isolation == nil && b.Recovery == nil {
		return 1, fmt.Errorf("%s: neither rush.json, nor drop-rush.json with drop-baseline.json, nor cart-rush.json with cart-baseline.json, "+
			"nor hold-storm.json with hold-baseline.json, nor group-rush.json with group-baseline.json, nor isolation.json or recovery.json", dir)
	}
	if !b.WriteTable(stdout) {
		return 1, nil
	}
	return 0, nil
}

// delayedDir is the subdirectory of a make bench directory that holds the
// runs at a commit delay (BENCH_COMMIT_DELAY_US).
const delayedDir = "commit-delay"

// readBench reads the runs of one commit regime from dir, and the commit
// delay they ran at from commit-delay-us.txt (none: local commits).
func readBench(dir string) (*loadtest.Bench, error) {
	var b loadtest.Bench
	if exists(dir, "rush.json") {
		if err := readFCFS(dir, &b); err != nil {
			return nil, err
		}
	}
	if err := readReports(dir, map[string]**loadtest.Report{"drop-baseline.json": &b.DropBaseline, "drop-rush.json": &b.DropRush,
		"cart-baseline.json": &b.CartBaseline, "cart-rush.json": &b.CartRush,
		"hold-baseline.json": &b.HoldBaseline, "hold-storm.json": &b.HoldStorm,
		"group-baseline.json": &b.GroupBaseline, "group-rush.json": &b.GroupRush,
		"isolation.json": &b.Isolation, "recovery.json": &b.Recovery}, true); err != nil {
		return nil, err
	}
	if exists(dir, "commit-delay-us.txt") {
		raw, err := os.ReadFile(filepath.Join(dir, "commit-delay-us.txt"))
		if err != nil {
			return nil, err
		}
		if b.CommitDelayUS, err = strconv.Atoi(strings.TrimSpace(string(raw))); err != nil || b.CommitDelayUS < 0 {
			return nil, fmt.Errorf("%s: commit-delay-us.txt must hold the commit delay in µs, a whole number ≥ 0, not %q", dir, raw)
		}
	}
	return &b, nil
}

// readFCFS reads the floor's and the first-come-first-served runs' files.
func readFCFS(dir string, b *loadtest.Bench) error {
	if err := readJSON(dir, "floor.json", &b.AsynqFloor); err != nil {
		return err
	}
	return readReports(dir, map[string]**loadtest.Report{"lean.json": &b.Lean, "rush.json": &b.Rush, "intake.json": &b.Intake}, false)
}

// readReports reads each named report file of dir into its destination;
// with optional, a missing file leaves its destination nil.
func readReports(dir string, files map[string]**loadtest.Report, optional bool) error {
	for name, dst := range files {
		if optional && !exists(dir, name) {
			continue
		}
		*dst = new(loadtest.Report)
		if err := readJSON(dir, name, *dst); err != nil {
			return err
		}
	}
	return nil
}

func readJSON(dir, name string, v any) error {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func exists(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}
