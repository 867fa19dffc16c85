package systest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/cmd/wiring"
	"github.com/holdfast/holdfast/config"
)

// EnvServeProcess is set in a re-executed test binary that must serve as
// an API or a worker (StartProcess): "api <name>" or "worker <name>".
const EnvServeProcess = "HOLDFAST_TEST_SERVE_PROCESS"

// listenerFD is where StartProcess hands its process the listener: the
// first of exec.Cmd.ExtraFiles.
const listenerFD = 3

// MaybeRunServeProcess turns the test binary into the API or a worker when
// it was started by StartProcess, serving on the listener it was handed, as
// cmd/api and cmd/worker do on theirs. Call it first in TestMain.
func MaybeRunServeProcess() {
	role := os.Getenv(EnvServeProcess)
	if role == "" {
		return
	}
	if err := serveProcess(role); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serveProcess(role string) error {
	binary, name, _ := strings.Cut(role, " ")
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	ln, err := net.FileListener(os.NewFile(listenerFD, "listener"))
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	log := cfg.Logger(os.Stderr).With("process", name)
	switch binary {
	case "api":
		return (&wiring.API{Config: cfg, Log: log, Listener: ln}).Run(ctx)
	case "worker":
		return (&wiring.Worker{Config: cfg, Log: log, Listener: ln, Name: name}).Run(ctx)
	}
	return fmt.Errorf("%s=%q: want api or worker", EnvServeProcess, role)
}

// Serving is an API or a worker in its own OS process, on a listener the
// test opened: its URL is known before it starts (the API's, or the
// worker's health and metrics), and its /readyz tells when it serves.
type Serving struct {
	*Process
	Name string
	URL  string
}

// StartProcess re-executes the test binary as binary ("api" or "worker")
// called name, with the system's configuration and overrides (name, value
// pairs) on top, as a Deployment's new pod: it returns at once, before the
// process is ready. A data race in it ends it (GORACE halt_on_error), so
// its exit status shows the race; the race detector's second of sleep
// before an exit is left out (atexit_sleep_ms), so that it exits when it
// is done. It is killed when the test ends.
func (s *System) StartProcess(binary, name string, overrides ...string) *Serving {
	t := s.t
	require.Zero(t, len(overrides)%2, "overrides are name, value pairs")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f, err := ln.(*net.TCPListener).File()
	require.NoError(t, err)
	url := "http://" + ln.Addr().String()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// The Redis selection comes from s.Vars alone: a REDIS_URL inherited
	// from the shell next to REDIS_CLUSTER_ADDRS would be refused as ambiguous.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDIS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, EnvServeProcess+"="+binary+" "+name, "GORACE=halt_on_error=1 atexit_sleep_ms=0")
	for k, v := range s.Vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	for i := 0; i < len(overrides); i += 2 {
		cmd.Env = append(cmd.Env, overrides[i]+"="+overrides[i+1])
	}
	cmd.ExtraFiles = []*os.File{f} // fd listenerFD in the process
	cmd.Stdout, cmd.Stderr = io.Discard, testLogWriter{t}
	err = cmd.Start()
	// The process holds the socket now; the test's copies would keep it
	// open (connections queueing, never refused) after the process closed it.
	_ = f.Close()
	_ = ln.Close()
	require.NoError(t, err)
	p := &Process{Cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return &Serving{Process: p, Name: name, URL: url}
}

// Exited waits up to timeout for the process to exit and returns its exit
// error (nil for status 0).
func (p *Process) Exited(timeout time.Duration) error {
	select {
	case err := <-p.done:
		p.done <- err // let the cleanup's receive finish
		return err
	case <-time.After(timeout):
		return errors.New("process did not exit in time")
	}
}
