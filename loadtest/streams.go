package loadtest

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/holdfast/holdfast/client"
)

// idleStreams: Users users join one event's waiting room, where nobody is
// admitted (admissions paused), and each holds its position stream open
// without polling for Duration (default 60 s) once every stream is open.
// The event's presence timeout is a tenth of that, at least 5 s, so only
// the streams keep the users in line: after the hold each must still be
// waiting. The report
// gives the API's resident memory and the CPU of the API and of Redis over
// the hold (Report.Streams). Every stream must be open at once, so it needs
// Concurrency ≥ Users.
type idleStreams struct {
	eventID  int64
	users    int
	hold     time.Duration
	streamer *client.Client // net/http: hands a stream's body over as it comes

	mu   sync.Mutex
	open int
	done chan struct{}
	bad  violations
	rep  *StreamsReport
}

// StreamsReport is what idle-streams measured over the hold.
type StreamsReport struct {
	Streams     int     `json:"streams"`
	HoldSeconds float64 `json:"holdSeconds"`
	// APIRSSMiB is the API's resident memory with every stream open, and
	// APIRSSBeforeMiB before the first was opened.
	APIRSSMiB       float64 `json:"apiRssMiB"`
	APIRSSBeforeMiB float64 `json:"apiRssBeforeMiB"`
	// CPUPercent is each part's CPU over the hold, in percent of one core.
	CPUPercent map[string]float64 `json:"cpuPercentOfOneCore"`
}

func (s *idleStreams) Setup(ctx context.Context, e *Env) (int, error) {
	s.users, s.hold = orDefault(e.Opt.Users, 2000), cmp.Or(max(e.Opt.Duration, 0), time.Minute)
	if e.Opt.Concurrency < s.users {
		return 0, fmt.Errorf("idle-streams holds every stream open at once: -concurrency (%d) must be at least -users (%d)", e.Opt.Concurrency, s.users)
	}
	presence := max(5, int(s.hold/time.Second)/10)
	paused := true
	ev, err := e.Admin.CreateEvent(ctx, client.NewEvent{Name: "idle streams " + e.RunID, SeatCount: 1,
		EventSettings: client.EventSettings{AdmissionPaused: &paused, PresenceTimeoutSeconds: &presence}})
	if err != nil {
		return 0, err
	}
	s.eventID, s.done = ev.EventID, make(chan struct{})
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost, tr.MaxConnsPerHost = s.users, 0
	s.streamer = client.NewWithHTTP(e.Opt.BaseURL, "", &http.Client{Transport: tr})
	s.rep = &StreamsReport{Streams: s.users, APIRSSBeforeMiB: apiRSS(ctx, e)}
	return s.users, nil
}

func (s *idleStreams) Journey(ctx context.Context, e *Env, i int) error {
	c, user, err := e.User(i)
	if err != nil {
		return err
	}
	out, err := e.Write(ctx, c, "queue.enter", func(ctx context.Context) (client.Accepted, error) { return c.EnterQueue(ctx, s.eventID) })
	if err != nil {
		return err
	}
	if err := out.Err(); err != nil {
		return fmt.Errorf("queue.enter for %s: %w", user, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.streamer.WithToken(e.tokens[i]).QueueStream(sctx, s.eventID)
	if err != nil {
		return fmt.Errorf("stream of %s: %w", user, err)
	}
	defer stream.Close()
	if st, err := stream.Next(); err != nil || st.Status != "waiting" {
		s.bad.add("%s's stream began with %+v, %v; want waiting", user, st, err)
	}
	s.mu.Lock()
	s.open++
	if s.open == s.users {
		go s.measure(ctx, e)
	}
	s.mu.Unlock()
	select {
	case <-s.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	var st client.QueueStatus
	if err := e.Read("queue.status", func() (err error) { st, err = c.QueueStatus(ctx, s.eventID); return err }); err != nil {
		return err
	}
	if st.Status != "waiting" {
		s.bad.add("%s is %s after holding its stream open: the stream must keep its place", user, st.Status)
	}
	return nil
}

// measure samples the API and Redis over the hold, then ends it.
func (s *idleStreams) measure(ctx context.Context, e *Env) {
	defer close(s.done)
	cpu := startCPU(ctx, e.Opt.MetricsURLs)
	start := time.Now()
	select {
	case <-time.After(s.hold):
	case <-ctx.Done():
		return
	}
	took := time.Since(start).Seconds()
	parts := cpu.read(ctx)
	s.rep.HoldSeconds, s.rep.APIRSSMiB = round(took, 1), apiRSS(ctx, e)
	s.rep.CPUPercent = map[string]float64{}
	for _, part := range []string{"api", CPURedis, CPULoadTool} {
		if v, ok := parts[part]; ok {
			s.rep.CPUPercent[part] = round(100*v/took, 1)
		}
	}
}

// apiRSS is the API's resident memory in MiB, 0 when not read.
func apiRSS(ctx context.Context, e *Env) float64 {
	v, _ := scrapeOne(ctx, &http.Client{Timeout: 2 * time.Second}, e.Opt.MetricsURLs["api"], metricRSS)
	return mib(v)
}

func (s *idleStreams) Check(context.Context, *Env) ([]string, error) { return s.bad.all(), nil }

func (s *idleStreams) report(r *Report) { r.Streams = s.rep }
