package requests

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// DoneChannel is the Redis pub/sub channel on which workers announce the ids
// of requests that just became terminal (comma separated, one message per
// batch). It only speeds up long-polls; they re-read Postgres regardless.
const DoneChannel = "holdfast:requests:done"

// DoneMessage is the DoneChannel message announcing that ids are terminal;
// Notifier parses it.
func DoneMessage(ids []string) string { return strings.Join(ids, ",") }

// Notifier fans DoneChannel messages out to local long-poll waiters.
type Notifier struct {
	rdb redis.UniversalClient
	log *slog.Logger

	mu      sync.Mutex
	waiters map[uuid.UUID][]chan struct{}
}

// NewNotifier returns a Notifier; call Run to start listening.
func NewNotifier(rdb redis.UniversalClient, log *slog.Logger) *Notifier {
	return &Notifier{rdb: rdb, log: log, waiters: make(map[uuid.UUID][]chan struct{})}
}

// Run listens until ctx ends, resubscribing after connection loss.
func (n *Notifier) Run(ctx context.Context) {
	for ctx.Err() == nil {
		sub := n.rdb.Subscribe(ctx, DoneChannel)
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

func (n *Notifier) deliver(payload string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.waiters) == 0 {
		return
	}
	for s := range strings.SplitSeq(payload, ",") {
		id, err := uuid.Parse(s)
		if err != nil {
			continue
		}
		for _, c := range n.waiters[id] {
			close(c)
		}
		delete(n.waiters, id)
	}
}

// Wait returns a channel closed when id is announced, and a cancel func that
// must be called if the caller stops waiting first.
func (n *Notifier) Wait(id uuid.UUID) (<-chan struct{}, func()) {
	c := make(chan struct{})
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
