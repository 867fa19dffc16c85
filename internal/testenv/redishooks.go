package testenv

import (
	"context"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Sent records what a go-redis client sends, round trip by round trip: the
// command names of each pipeline, and each command sent on its own. Tests
// count round trips with it.
type Sent struct {
	mu        sync.Mutex
	pipelines [][]string
	alone     []string
}

// WatchRedis starts recording what rdb sends.
func WatchRedis(rdb redis.UniversalClient) *Sent {
	s := &Sent{}
	rdb.AddHook(s)
	return s
}

// Reset forgets what was recorded so far.
func (s *Sent) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pipelines, s.alone = nil, nil
}

// Pipelines returns, for each pipeline that carried any command named in
// names, how many of those it carried; with no names, every pipeline's
// length. go-redis pipelines its own handshake on a new connection, which
// naming the commands of interest leaves out.
func (s *Sent) Pipelines(names ...string) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for _, p := range s.pipelines {
		if n := count(p, names); n > 0 {
			out = append(out, n)
		}
	}
	return out
}

// Alone counts the commands sent on their own that are named in names; with
// no names, all of them.
func (s *Sent) Alone(names ...string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return count(s.alone, names)
}

func count(sent, names []string) int {
	if len(names) == 0 {
		return len(sent)
	}
	n := 0
	for _, c := range sent {
		if slices.Contains(names, c) {
			n++
		}
	}
	return n
}

func (*Sent) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *Sent) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.mu.Lock()
		s.alone = append(s.alone, cmd.Name())
		s.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (s *Sent) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.Name()
		}
		s.mu.Lock()
		s.pipelines = append(s.pipelines, names)
		s.mu.Unlock()
		return next(ctx, cmds)
	}
}

// OnPipeline is a go-redis hook that hands every pipeline to the function,
// which sends it by calling next (or fails it, or sends it twice), as a
// flaky network or server would.
type OnPipeline func(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error

func (OnPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (OnPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (f OnPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { return f(ctx, cmds, next) }
}

// AtOnce runs f(0) … f(n-1) on n goroutines released together, and returns
// their errors: the way tests race concurrent callers.
func AtOnce(n int, f func(i int) error) []error {
	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = f(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}
