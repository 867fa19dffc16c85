package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
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
	if err == nil && exists(dir, delayedDir) {
		b.Delayed, err = readBench(filepath.Join(dir, delayedDir))
	}
	if err != nil {
		return 1, err
	}
	b.Machine = strings.TrimSpace(string(machine))
	b.Cores = runtime.NumCPU() // the table is made on the machine that ran the bench
	if !b.WriteTable(stdout) {
		return 1, nil
	}
	return 0, nil
}

// delayedDir is the subdirectory of a make bench directory that holds the
// runs at a commit delay (BENCH_COMMIT_DELAY_US).
const delayedDir = "commit-delay"

// readBench reads the runs of one commit regime from dir, and the commit
// delay they ran at from commit-delay-us.txt (none: local commits). A part
// is there when all its files are; a file of a part whose others are
// missing is an error, and so is a directory with no part.
func readBench(dir string) (*loadtest.Bench, error) {
	var b loadtest.Bench
	parts := []map[string]any{
		{"floor.json": &b.AsynqFloor, "lean.json": &b.Lean, "rush.json": &b.Rush, "intake.json": &b.Intake},
		{"drop-baseline.json": &b.DropBaseline, "drop-rush.json": &b.DropRush},
		{"cart-baseline.json": &b.CartBaseline, "cart-rush.json": &b.CartRush},
		{"hold-baseline.json": &b.HoldBaseline, "hold-storm.json": &b.HoldStorm},
		{"group-baseline.json": &b.GroupBaseline, "group-rush.json": &b.GroupRush},
		{"isolation.json": &b.Isolation}, {"recovery.json": &b.Recovery},
	}
	measured := 0
	for _, files := range parts {
		found := 0
		for name := range files {
			if exists(dir, name) {
				found++
			}
		}
		if found == 0 {
			continue
		}
		for name, dst := range files {
			raw, err := os.ReadFile(filepath.Join(dir, name))
			if err == nil {
				err = json.Unmarshal(raw, dst)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
		measured++
	}
	if measured == 0 {
		return nil, fmt.Errorf("%s: no part measured: no floor.json, lean.json, rush.json and intake.json, "+
			"no drop-, cart-, hold- or group-baseline.json with its rush, no isolation.json or recovery.json", dir)
	}
	switch raw, err := os.ReadFile(filepath.Join(dir, "commit-delay-us.txt")); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if b.CommitDelayUS, err = strconv.Atoi(strings.TrimSpace(string(raw))); err != nil || b.CommitDelayUS < 0 {
			return nil, fmt.Errorf("%s: commit-delay-us.txt must hold the commit delay in µs, a whole number ≥ 0, not %q", dir, raw)
		}
	}
	return &b, nil
}

func exists(dir, name string) bool {
	_, err := os.Stat(filepath.Join(dir, name))
	return err == nil
}
