package events

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// positions fans waiting-room statuses out to the position streams open on
// this API process (GET /api/v1/events/{id}/queue/stream). Each event with
// open streams has one watcher, which asks Redis for the statuses of all of
// its streams' users in one script every tick (Room.Statuses, which also
// counts each as a sign of life) and hands each stream its latest status;
// a stream writes it only when it changed. A thousand open streams on one
// event cost one round trip per tick, not a thousand.
//
// Bounds: one watcher per event with an open stream here, one subscriber per
// open stream, at most maxStreamsPerUser streams of one user on one event
// here (a stream costs the API about 100 KiB); a watcher ends with its last
// stream.
type positions struct {
	room   *Room
	sealer *Sealer
	event  func(context.Context, int64) (Event, error) // the handlers' cached read
	tick   time.Duration
	log    *slog.Logger

	mu       sync.Mutex
	watchers map[int64]*watcher
	perUser  map[userStream]int // open streams of a user on an event
}

type userStream struct {
	ev     int64
	member string
}

// maxStreamsPerUser bounds one user's open streams on one event, per API
// process: a few tabs, not a flood.
const maxStreamsPerUser = 4

type watcher struct {
	subs map[*subscriber]struct{}
}

// subscriber is one open stream: its user's member and a one-slot mailbox
// in which a newer status replaces one not yet written.
type subscriber struct {
	member string
	ch     chan Status
}

// streamTick is how often a watcher reads its users' statuses: the delay
// with which a stream shows a change.
const streamTick = time.Second

func newPositions(room *Room, sealer *Sealer, event func(context.Context, int64) (Event, error), log *slog.Logger) *positions {
	return &positions{room: room, sealer: sealer, event: event, tick: streamTick, log: log,
		watchers: map[int64]*watcher{}, perUser: map[userStream]int{}}
}

// open counts a stream of member on ev, unless the user has
// maxStreamsPerUser open here already; release undoes it.
func (p *positions) open(ev int64, member string) (release func(), ok bool) {
	k := userStream{ev, member}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.perUser[k] >= maxStreamsPerUser {
		return nil, false
	}
	p.perUser[k]++
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.perUser[k]--; p.perUser[k] == 0 {
			delete(p.perUser, k)
		}
	}, true
}

// subscribe registers a stream of member on event ev; cancel unregisters it.
func (p *positions) subscribe(ev int64, member string) (sub *subscriber, cancel func()) {
	sub = &subscriber{member: member, ch: make(chan Status, 1)}
	p.mu.Lock()
	w, ok := p.watchers[ev]
	if !ok {
		w = &watcher{subs: map[*subscriber]struct{}{}}
		p.watchers[ev] = w
	}
	w.subs[sub] = struct{}{}
	p.mu.Unlock()
	if !ok {
		go p.watch(ev, w)
	}
	return sub, func() {
		p.mu.Lock()
		delete(w.subs, sub)
		p.mu.Unlock()
	}
}

// watch serves ev's streams until it has none.
func (p *positions) watch(ev int64, w *watcher) {
	t := time.NewTicker(p.tick)
	defer t.Stop()
	for range t.C {
		p.mu.Lock()
		if len(w.subs) == 0 {
			delete(p.watchers, ev)
			p.mu.Unlock()
			return
		}
		subs := make([]*subscriber, 0, len(w.subs))
		members := make([]string, 0, len(w.subs))
		for s := range w.subs {
			subs = append(subs, s)
			members = append(members, s.member)
		}
		p.mu.Unlock()
		if err := p.push(ev, subs, members); err != nil {
			p.log.Warn("position streams: could not read statuses", "event", ev, "err", err)
		}
	}
}

// push reads the statuses of members and hands them to subs.
func (p *positions) push(ev int64, subs []*subscriber, members []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), p.tick)
	defer cancel()
	e, err := p.event(ctx, ev)
	if err != nil {
		return err
	}
	sts, err := p.statuses(ctx, e, members)
	if err != nil {
		return err
	}
	for i, st := range sts {
		offer(subs[i].ch, st)
	}
	return nil
}

// statuses reads the statuses of members (Room.Statuses). If one of them
// waits for the pre-queue's seal and the seal is due, it seals and reads
// them again, as a status poll does (handlers.queueStatus).
func (p *positions) statuses(ctx context.Context, e Event, members []string) ([]Status, error) {
	sts, err := p.room.Statuses(ctx, e, members)
	if err != nil || !slices.ContainsFunc(sts, func(st Status) bool { return st.reason == "prequeue" }) {
		return sts, err
	}
	sealed, err := p.sealer.TrySeal(ctx, e, time.Now())
	if err != nil {
		p.log.Warn("could not seal the pre-queue", "event", e.EventID, "err", err)
	}
	if !sealed || err != nil {
		return sts, nil
	}
	return p.room.Statuses(ctx, e, members)
}

// offer puts st in a one-slot mailbox, replacing what is unread there.
func offer(ch chan Status, st Status) {
	for {
		select {
		case ch <- st:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}

// keepAlive is how often a quiet stream writes a comment: often enough that
// a closed tab is noticed (by the failed write) well within the presence
// timeout, since an open stream counts as presence; never more than every
// 15 s, never less than every tick.
func keepAlive(presenceTimeout int) time.Duration {
	return min(15*time.Second, max(streamTick, time.Duration(presenceTimeout)*time.Second/4))
}

// serve writes a stream to w: the first status at once, then each changed
// one, with keep-alive comments, until a write fails (the client left) or
// done closes (the server shuts down).
func (p *positions) serve(w *bufio.Writer, e Event, member string, first Status, done <-chan struct{}) {
	sub, cancel := p.subscribe(e.EventID, member)
	defer cancel()
	beat := time.NewTicker(keepAlive(e.PresenceTimeoutSeconds))
	defer beat.Stop()
	// A browser's EventSource reconnects by itself after a failure; two
	// seconds spares a crowd's reconnects from arriving all at once.
	if _, err := w.WriteString("retry: 2000\n\n"); err != nil {
		return
	}
	var last []byte
	write := func(st Status) bool {
		b, err := json.Marshal(st)
		if err != nil {
			return false
		}
		if string(b) == string(last) {
			return true
		}
		last = b
		_, err = fmt.Fprintf(w, "event: status\ndata: %s\n\n", b)
		return err == nil && w.Flush() == nil
	}
	if !write(first) {
		return
	}
	for {
		select {
		case <-done:
			return
		case st := <-sub.ch:
			if !write(st) {
				return
			}
		case <-beat.C:
			if _, err := w.WriteString(": keep-alive\n\n"); err != nil || w.Flush() != nil {
				return
			}
		}
	}
}
