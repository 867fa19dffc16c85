package api

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/internal/recent"
	"github.com/holdfast/holdfast/requests"
)

// Notifier fans the outcomes workers announce (requests.DoneChannel) out to
// the long polls waiting in this process. It also remembers, for a few
// seconds, the requests accepted here (Track) and whether they have been
// announced since. A client mostly polls
// over the connection it submitted on, right after its 202, so its long poll
// usually reaches the process that accepted the request before the outcome
// is announced, and waits for it without reading Postgres.
//
// Answering from the announced view, rather than reading Postgres once
// woken, measured in pairs (A/B pairs, docs/benchmarks.md, fcfs-rush of 40,000 users on two
// cores, 2026-11-26): 6,608 and 6,552 journeys a second against 3,832 and
// 3,683 without it, and 0.232 and 0.240 ms of CPU a journey against 0.363
// and 0.384. ANNOUNCED_VIEWS=false turns that off (await); the
// announcement still wakes the poll.
type Notifier struct {
	rdb redis.UniversalClient

	mu      sync.Mutex
	waiters map[uuid.UUID][]chan []byte
	// tracked are the requests accepted here; announced is set and read
	// under mu.
	tracked *recent.Map[uuid.UUID, *Tracked]
}

// Tracked is what a Notifier remembers of a request accepted in its process.
type Tracked struct {
	Owner     string
	Announced bool // announced terminal since it was accepted
	// View is the terminal view the announcement carried, kept when no poll
	// was waiting for it (else nil; nil too once a poll took it): a poll that
	// comes after the announcement answers with it, as a woken poll does,
	// without reading Postgres.
	View []byte
}

// How long and how many accepted requests a Notifier remembers (each for
// between trackFor and twice that, at most 2 × trackMax). A poll that comes
// later reads Postgres, as a poll on another replica does.
const (
	trackFor = 5 * time.Second
	trackMax = 50_000
)

// NewNotifier returns a Notifier; call Run to start listening.
func NewNotifier(rdb redis.UniversalClient) *Notifier {
	return &Notifier{rdb: rdb, waiters: make(map[uuid.UUID][]chan []byte),
		tracked: recent.New[uuid.UUID, *Tracked](trackFor, trackMax)}
}

// Track remembers that this process accepted request id for owner. Intake
// calls it before the request can reach a worker, so no announcement of it
// can come first.
func (n *Notifier) Track(id uuid.UUID, owner string) {
	n.tracked.Put(id, &Tracked{Owner: owner})
}

// Local reports whether this process accepted id (and still remembers it),
// with what it knows of it. A kept view goes only to a caller mayRead lets
// see the owner's requests, and once: the poll that gets it answers with
// it, and a poll after that reads Postgres.
func (n *Notifier) Local(id uuid.UUID, mayRead func(owner string) bool) (Tracked, bool) {
	t, ok := n.tracked.Get(id)
	if !ok {
		return Tracked{}, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	got := *t
	if !mayRead(t.Owner) {
		got.View = nil
		return got, true
	}
	t.View = nil
	return got, true
}

// Run listens until ctx ends, resubscribing after connection loss.
func (n *Notifier) Run(ctx context.Context) {
	for ctx.Err() == nil {
		sub := n.rdb.Subscribe(ctx, requests.DoneChannel)
		ch := sub.Channel(redis.WithChannelHealthCheckInterval(5 * time.Second))
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case msg, ok := <-ch:
				if !ok {
					break loop
				}
				n.deliver(msg.Payload)
			}
		}
		_ = sub.Close()
		if ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// deliver hands each announced request's view (requests.DoneMessage) to its
// waiters; a line that is not an id and a view is ignored.
func (n *Notifier) deliver(payload string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.waiters) == 0 && n.tracked.Len() == 0 {
		return
	}
	for line := range strings.Lines(payload) {
		if s, view, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " "); ok && view != "" {
			n.wake(s, view)
		}
	}
}

// wake marks request s announced and sends view to its waiters.
func (n *Notifier) wake(s, view string) {
	id, err := uuid.Parse(s)
	if err != nil {
		return
	}
	ws := n.waiters[id]
	t, tracked := n.tracked.Get(id)
	if !tracked && len(ws) == 0 {
		return // accepted by another replica, and nobody here waits
	}
	b := []byte(view)
	if tracked {
		t.Announced = true
		if len(ws) == 0 {
			// Kept for the poll that has yet to come; a poll that waits
			// already gets it below, and the API need not hold a copy of
			// every view in a rush.
			t.View = b
		}
	}
	if len(ws) == 0 {
		return
	}
	for _, c := range ws {
		c <- b // buffered, and each waiter is sent to once
	}
	delete(n.waiters, id)
}

// Wait returns a channel that receives the request's terminal view when id
// is announced, and a cancel func that must be called if the caller stops
// waiting first.
func (n *Notifier) Wait(id uuid.UUID) (<-chan []byte, func()) {
	c := make(chan []byte, 1)
	n.mu.Lock()
	n.waiters[id] = append(n.waiters[id], c)
	n.mu.Unlock()
	return c, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		ws := n.waiters[id]
		for i, w := range ws {
			if w == c {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(n.waiters, id)
		} else {
			n.waiters[id] = ws
		}
	}
}
