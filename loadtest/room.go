package loadtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/holdfast/holdfast/client"
	"github.com/holdfast/holdfast/events/draw"
)

// waitingRoomRush: users join an event's waiting room, wait for their turn
// (polling their status, as the waiting-room page does), claim an entry
// token, pick a free seat from the listing and book it, trying other seats
// when theirs was taken, until booked or sold out. Options add a crowd's
// habits: a share never claims its turn (NeverClaimPct), a share leaves
// mid-queue (LeavePct), and a pre-queue before the sale (Prequeue), joined
// by the journeys that start before it. The room's presence timeout and
// claim window are roomTimeout, so abandoned places free within the run.
type waitingRoomRush struct {
	eventID       int64
	seats, users  int
	maxConcurrent int
	tokenTTL      time.Duration
	perMinute     int       // admitPerMinute; 0 for none
	start         time.Time // the sale's start; zero without a pre-queue
	book          *seatBook

	mu     sync.Mutex
	visits []*roomVisit
}

// roomTimeout is the presence timeout and claim window of the rush's event.
const roomTimeout = 10

type visitKind int

const (
	present     visitKind = iota // polls, claims its turn, books
	neverClaims                  // polls but lets its turn pass
	leaves                       // stops polling mid-queue
)

// roomVisit is one user's journey through the room, as its client saw it.
type roomVisit struct {
	user     string
	kind     visitKind
	prequeue bool      // entered before the sale started
	sent     time.Time // when its entry was sent
	entered  time.Time // when its entry's 202 arrived
	granted  time.Time // the server's grant: the token's expiry minus its TTL
	seen     time.Time // when the client had the token
	released time.Time // when the client sent what gave the token back (zero: it expired)
	expires  time.Time
	expired  bool // was told it lost its place
}

func (s *waitingRoomRush) Setup(ctx context.Context, e *Env) (int, error) {
	s.seats, s.users = orDefault(e.Opt.Seats, 500), orDefault(e.Opt.Users, 1000)
	s.book = newSeatBook()
	s.maxConcurrent, s.tokenTTL, s.perMinute = 100, time.Minute, e.Opt.AdmitPerMinute
	ttl, required, timeout := int(s.tokenTTL/time.Second), true, roomTimeout
	set := client.EventSettings{MaxConcurrent: &s.maxConcurrent, TokenTTLSeconds: &ttl, EntryTokenRequired: &required,
		PresenceTimeoutSeconds: &timeout, ClaimWindowSeconds: &timeout}
	if s.perMinute > 0 {
		set.AdmitPerMinute = &s.perMinute
	}
	if e.Opt.Prequeue > 0 {
		s.start = time.Now().Add(e.Opt.Prequeue).Truncate(time.Second).Add(time.Second)
		set.SalesStartAt = &s.start
	}
	ev, err := e.Admin.CreateEvent(ctx, client.NewEvent{Name: "waiting room " + e.RunID, SeatCount: s.seats, EventSettings: set})
	if err != nil {
		return 0, err
	}
	s.eventID = ev.EventID
	return s.users, nil
}

func (s *waitingRoomRush) Journey(ctx context.Context, e *Env, i int) error {
	c, user, err := e.User(i)
	if err != nil {
		return err
	}
	v := &roomVisit{user: user}
	// Each hundred users holds exactly the shares asked for, spread over
	// the run: 61 is coprime with 100, so i*61 mod 100 visits 0…99 once.
	switch r := i * 61 % 100; {
	case r < e.Opt.NeverClaimPct:
		v.kind = neverClaims
	case r < e.Opt.NeverClaimPct+e.Opt.LeavePct:
		v.kind = leaves
	}
	s.mu.Lock()
	s.visits = append(s.visits, v)
	s.mu.Unlock()

	v.sent = time.Now()
	out, err := e.Write(ctx, c, "queue.enter", func(ctx context.Context) (client.Accepted, error) { return c.EnterQueue(ctx, s.eventID) })
	if err != nil {
		return err
	}
	var st client.QueueStatus
	if err := out.Decode(&st); err != nil {
		return fmt.Errorf("queue.enter for %s: %w", user, err)
	}
	v.entered, v.prequeue = time.Now(), st.Status == "prequeue"
	leaveAt := time.Now().Add(time.Duration(e.IntN(3000)) * time.Millisecond)
	tok, err := s.wait(ctx, e, c, v, leaveAt)
	if err != nil || tok.EntryToken == "" {
		return err
	}
	return s.bookSeat(ctx, e, c, v, tok)
}

// wait polls the user's place about once a second until it holds a token,
// or, for the users who abandon, until it gives up or is told its place is
// lost.
func (s *waitingRoomRush) wait(ctx context.Context, e *Env, c *client.Client, v *roomVisit, leaveAt time.Time) (client.EntryToken, error) {
	for {
		var st client.QueueStatus
		if err := e.Read("queue.status", func() (err error) { st, err = c.QueueStatus(ctx, s.eventID); return err }); err != nil {
			return client.EntryToken{}, err
		}
		switch {
		case st.Status == "expired":
			v.expired = true
			return client.EntryToken{}, nil
		case v.kind == leaves && time.Now().After(leaveAt):
			return client.EntryToken{}, nil // closed the tab
		case st.Status == "ready" && v.kind != neverClaims:
			var tok client.EntryToken
			err := e.Read("queue.token", func() (err error) { tok, err = c.IssueToken(ctx, s.eventID); return err })
			if err == nil {
				v.seen, v.expires, v.granted = time.Now(), tok.ExpiresAt, tok.ExpiresAt.Add(-s.tokenTTL)
				return tok, nil
			}
			if !client.IsCode(err, client.CodeNotYourTurn) {
				return client.EntryToken{}, fmt.Errorf("token for %s: %w", v.user, err)
			}
		}
		select {
		case <-time.After(time.Duration(700+e.IntN(600)) * time.Millisecond):
		case <-ctx.Done():
			return client.EntryToken{}, ctx.Err()
		}
	}
}

// bookSeat books a free seat with the token, trying others while taken; a
// booking gives the token back, and so does a user who found none.
func (s *waitingRoomRush) bookSeat(ctx context.Context, e *Env, c *client.Client, v *roomVisit, tok client.EntryToken) error {
	var free []client.Seat
	if err := e.Read("seats", func() (err error) { free, err = c.Seats(ctx, s.eventID, "available"); return err }); err != nil {
		return err
	}
	for len(free) > 0 {
		k := e.IntN(len(free))
		seat := free[k]
		free[k] = free[len(free)-1]
		free = free[:len(free)-1]
		sent := time.Now()
		out, err := e.Write(ctx, c, "seat.book", func(ctx context.Context) (client.Accepted, error) {
			return c.BookSeat(ctx, s.eventID, seat.SeatID, tok.EntryToken)
		})
		if err != nil {
			return err
		}
		var b client.Booking
		switch err := out.Decode(&b); {
		case err == nil:
			s.book.won(v.user, b.SeatID)
			v.released = sent
			return nil
		case client.IsCode(err, client.CodeSeatTaken):
		case client.IsCode(err, client.CodeSoldOut):
			free = nil
		default:
			return fmt.Errorf("booking for %s: %w", v.user, err)
		}
	}
	s.book.sold()
	v.released = time.Now()
	return c.LeaveQueue(ctx, s.eventID)
}

func (s *waitingRoomRush) Check(ctx context.Context, e *Env) ([]string, error) {
	out, err := s.book.check(ctx, e, s.eventID, s.seats, s.users)
	if err != nil {
		return nil, err
	}
	places, bad, err := s.prequeuePlaces(ctx, e)
	if err != nil {
		return nil, err
	}
	out = append(out, bad...)
	s.mu.Lock()
	defer s.mu.Unlock()
	out = append(out, s.checkCaps()...)
	return append(out, s.checkOrder(places)...), nil
}

// prequeuePlaces verifies the pre-queue's order from the public data and
// returns each entrant's place in it.
func (s *waitingRoomRush) prequeuePlaces(ctx context.Context, e *Env) (map[string]int, []string, error) {
	if s.start.IsZero() {
		return nil, nil, nil
	}
	pub, err := e.Admin.PublicEvent(ctx, s.eventID)
	if err != nil {
		return nil, nil, err
	}
	entrants, sealed, err := e.Admin.Prequeue(ctx, s.eventID)
	if err != nil {
		return nil, nil, err
	}
	if pub.ShuffleSeed == nil || !sealed {
		return nil, []string{"the sale started, but the pre-queue's seed is not public or its list not sealed"}, nil
	}
	p := draw.Prequeue{Commitment: pub.ShuffleCommitment, Seed: *pub.ShuffleSeed, Entrants: entrants}
	places := map[string]int{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.visits {
		if !v.prequeue {
			continue
		}
		_, place, err := draw.Verify(p, v.user)
		if err != nil {
			return nil, []string{"pre-queue: " + err.Error()}, nil
		}
		if place < 0 {
			return nil, []string{fmt.Sprintf("%s entered the pre-queue but is not in its public list", v.user)}, nil
		}
		places[v.user] = place
	}
	return places, nil, nil
}

// checkCaps checks maxConcurrent and admitPerMinute over the tokens the
// clients got. A token counts from its grant (the server's time) until the
// client sent what gave it back, or its expiry: a span within the one the
// server counted, so an overlap found here was there.
func (s *waitingRoomRush) checkCaps() []string {
	type edge struct {
		at time.Time
		d  int
	}
	var edges []edge
	var grants []time.Time
	for _, v := range s.visits {
		if v.granted.IsZero() {
			continue
		}
		end := v.expires
		if !v.released.IsZero() && v.released.Before(end) {
			end = v.released
		}
		edges = append(edges, edge{v.granted, 1}, edge{end, -1})
		grants = append(grants, v.granted)
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d // an end before a start at the same instant
	})
	var out []string
	held, most := 0, 0
	for _, x := range edges {
		held += x.d
		most = max(most, held)
	}
	if most > s.maxConcurrent {
		out = append(out, fmt.Sprintf("%d entry tokens valid at once, maxConcurrent is %d", most, s.maxConcurrent))
	}
	if s.perMinute > 0 {
		if n := mostInAMinute(grants); n > s.perMinute {
			out = append(out, fmt.Sprintf("%d admissions within 60 s, admitPerMinute is %d", n, s.perMinute))
		}
	}
	return out
}

// mostInAMinute is the most instants of ts within any 60 s window.
func mostInAMinute(ts []time.Time) int {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i, j := 0, 0; i < len(ts); i++ {
		for ts[i].Sub(ts[j]) >= time.Minute {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// checkOrder checks that every present user was admitted, and that none was
// overtaken: when a present user got its token, fewer than maxConcurrent
// present users ahead of it were still without one (those ahead of it may
// have been ready with it and claimed a moment later). Ahead means: in the
// pre-queue, a lower place in the verified shuffle; any pre-queue entrant
// is ahead of anyone who came after the start; after the start, an entry
// whose 202 arrived before the other was sent (K3: concurrent entries have
// no order).
func (s *waitingRoomRush) checkOrder(places map[string]int) []string {
	var line []*roomVisit // present users, in the order they should be admitted
	missing := 0
	for _, v := range s.visits {
		if v.kind != present {
			continue
		}
		if v.granted.IsZero() {
			missing++
		}
		line = append(line, v)
	}
	var out []string
	if missing > 0 {
		out = append(out, fmt.Sprintf("%d users who stayed present were never admitted", missing))
	}
	slices.SortFunc(line, func(a, b *roomVisit) int {
		switch {
		case a.prequeue && b.prequeue:
			return places[a.user] - places[b.user]
		case a.prequeue != b.prequeue:
			if a.prequeue {
				return -1
			}
			return 1
		}
		return a.entered.Compare(b.entered)
	})
	firstAfter, _ := slices.BinarySearchFunc(line, true, func(v *roomVisit, _ bool) int {
		if v.prequeue {
			return -1
		}
		return 1
	})
	// ahead(i) is how many of line come before line[i].
	ahead := func(i int) int {
		v := line[i]
		if v.prequeue {
			return i
		}
		n, _ := slices.BinarySearchFunc(line[firstAfter:], v.sent, func(w *roomVisit, t time.Time) int {
			if w.entered.Before(t) {
				return -1
			}
			return 1
		})
		return firstAfter + n
	}
	byGrant := make([]int, 0, len(line))
	for i, v := range line {
		if !v.granted.IsZero() {
			byGrant = append(byGrant, i)
		}
	}
	slices.SortFunc(byGrant, func(a, b int) int { return line[a].granted.Compare(line[b].granted) })
	done := newFenwick(len(line)) // positions in line granted so far
	overtaken := 0
	for _, i := range byGrant {
		if n := ahead(i); n-done.sum(n) >= s.maxConcurrent {
			overtaken++
		}
		done.add(i)
	}
	if overtaken > 0 {
		out = append(out, fmt.Sprintf("%d present users were admitted while %d or more present users ahead of them still waited",
			overtaken, s.maxConcurrent))
	}
	return out
}

// roomReport summarises the room's side of the run.
func (s *waitingRoomRush) roomReport() *RoomReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &RoomReport{MaxConcurrent: s.maxConcurrent, AdmitPerMinute: s.perMinute}
	var grants []time.Time
	var waits []time.Duration
	for _, v := range s.visits {
		switch {
		case v.prequeue:
			r.PrequeueEntrants++
		}
		switch v.kind {
		case neverClaims:
			r.NeverClaimed++
		case leaves:
			r.LeftMidQueue++
		}
		if v.expired {
			r.ToldExpired++
		}
		if v.granted.IsZero() {
			continue
		}
		grants = append(grants, v.granted)
		if v.kind == present {
			from := v.sent
			if v.prequeue && s.start.After(from) {
				from = s.start // the wait before the sale is not time in line
			}
			waits = append(waits, v.seen.Sub(from))
		}
	}
	r.Admissions = len(grants)
	r.PeakPerMinute = mostInAMinute(grants)
	if len(grants) > 1 {
		first, last := slices.MinFunc(grants, time.Time.Compare), slices.MaxFunc(grants, time.Time.Compare)
		if d := last.Sub(first); d > 0 {
			r.MeanPerMinute = round(float64(len(grants)-1)/d.Minutes(), 1)
		}
	}
	r.TimeInQueue = percentiles(sorted(waits))
	return r
}

// RoomReport is what waiting-room-rush saw of the room.
type RoomReport struct {
	MaxConcurrent  int `json:"maxConcurrent"`
	AdmitPerMinute int `json:"admitPerMinute,omitempty"`
	Admissions     int `json:"admissions"`
	// PeakPerMinute is the most admissions in any 60 s window;
	// MeanPerMinute their rate from the first to the last.
	PeakPerMinute    int     `json:"peakAdmissionsPerMinute"`
	MeanPerMinute    float64 `json:"meanAdmissionsPerMinute"`
	PrequeueEntrants int     `json:"prequeueEntrants"`
	NeverClaimed     int     `json:"neverClaimed"`
	LeftMidQueue     int     `json:"leftMidQueue"`
	ToldExpired      int     `json:"toldExpired"`
	// TimeInQueue is, for the users who stayed, from entering (or from the
	// sale's start, for pre-queue entrants) to holding a token.
	TimeInQueue Percentiles `json:"timeInQueue"`
}

// fenwick counts marked positions below an index in O(log n).
type fenwick []int

func newFenwick(n int) fenwick { return make(fenwick, n+1) }

func (f fenwick) add(i int) {
	for i++; i < len(f); i += i & -i {
		f[i]++
	}
}

// sum is how many positions below n are marked.
func (f fenwick) sum(n int) int {
	s := 0
	for ; n > 0; n -= n & -n {
		s += f[n]
	}
	return s
}
