package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/api"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/internal/lincheck"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/shop"
)

// The workload of a fault history: a few hot keys — two FCFS events and
// two product options — and clients on each that record every operation,
// from the moment they send it to the moment they learn its outcome, into
// the lincheck recorders of the FCFS and the stock models.

// The workload's shape.
const (
	jepsenEvents       = 2
	jepsenSeats        = 300 // per event: sold out late in a history, so SOLD_OUT is checked too
	jepsenFCFSClients  = 4   // per event
	jepsenOptions      = 2
	jepsenStock        = 60 // per option; confirms take it down as the history goes on
	jepsenShopClients  = 4  // per option, each a user of its own
	jepsenConfirmEvery = 8  // one reservation in this many is confirmed, the others released
	// jepsenBackoff is a client's pause after an answer that was not an
	// outcome (a 503, a 429, a read that failed) before its next request,
	// so an outage is not a spin of refusals.
	jepsenBackoff = 500 * time.Millisecond
)

// jepsenLoad is a history's clients and what they recorded.
type jepsenLoad struct {
	t      *testing.T
	r      *rig
	http   *http.Client // behind the balancer: viaBalancer; nil for systest's own
	seats  *lincheck.Recorder
	stock  *lincheck.Recorder
	fx     jepsenFixtures
	quit   chan struct{}
	done   sync.WaitGroup
	nextID atomic.Int64 // FCFS users

	mu         sync.Mutex
	ops        int
	counts     map[lincheck.Status]int
	codes      map[string]int  // refusals and answers at the door, by code
	unanswered int             // reads that got no answer, not recorded
	unseen     []unseenWrite   // writes answered at the door, or never
	known      map[string]bool // request ids some client learnt
	changed    chan struct{}   // closed, and replaced, on each operation recorded
}

// jepsenFixtures are the hot keys, as the models take them.
type jepsenFixtures struct {
	events  []int64
	seats   map[string][]int64 // event key → its seat ids
	options []int64
	stock   map[string]int // option key → its stock
}

// unseenWrite is a write whose request, if one was stored, no client
// knows of: answered at the door (the client was told it was not stored),
// or never answered however often it was sent (an unknown outcome).
type unseenWrite struct {
	client  int
	key     string
	user    string
	reqType string
	op      any
	told    lincheck.Status // not accepted, or unknown
	code    string          // the answer's error code, if it had one
	sent    time.Time
	learnt  time.Time
}

// startLoad creates the hot keys through the API and starts the clients.
func startLoad(t *testing.T, r *rig) *jepsenLoad {
	l := &jepsenLoad{t: t, r: r, seats: lincheck.NewRecorder(), stock: lincheck.NewRecorder(), quit: make(chan struct{}),
		counts: map[lincheck.Status]int{}, codes: map[string]int{}, known: map[string]bool{}, changed: make(chan struct{})}
	if r.lb != nil {
		l.http = balancedHTTP(t)
	}
	admin := l.client("jepsen-admin", domain.RoleAdmin)
	l.fx = jepsenFixtures{seats: map[string][]int64{}, stock: map[string]int{}}
	for i := range jepsenEvents {
		ev := hotEvent(t, admin, fmt.Sprintf("hot event %d", i))
		l.fx.events = append(l.fx.events, ev)
		l.fx.seats[events.EventKey(ev)] = eventSeatIDs(t, admin, ev)
	}
	for i := range jepsenOptions {
		opt := hotOption(t, admin, fmt.Sprintf("hot-%d", i))
		l.fx.options = append(l.fx.options, opt)
		l.fx.stock[shop.OptionKey(opt)] = jepsenStock
	}
	for i, ev := range l.fx.events {
		for j := range jepsenFCFSClients {
			l.done.Go(func() { l.fcfsClient(i*jepsenFCFSClients+j, ev) })
		}
	}
	for i, opt := range l.fx.options {
		for j := range jepsenShopClients {
			user := shopUser(t, admin, fmt.Sprintf("shopper %d-%d", i, j))
			units := 1 + j%3
			l.done.Go(func() { l.shopClient(i*jepsenShopClients+j, user, opt, units) })
		}
	}
	t.Cleanup(l.stop)
	return l
}

// client is a client of the rig's API (or its balancer) acting as sub.
func (l *jepsenLoad) client(sub string, role domain.Role) *systest.Client {
	c := l.r.s.Client(sub, role).At(l.r.URL())
	if l.http != nil {
		c.HTTP = l.http
	}
	return c
}

func hotEvent(t *testing.T, admin *systest.Client, name string) int64 {
	t.Helper()
	r := admin.DoPatiently("POST", "/api/v1/events", map[string]any{"name": name, "seatCount": jepsenSeats})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var e events.Event
	r.JSON(t, &e)
	return e.EventID
}

func eventSeatIDs(t *testing.T, c *systest.Client, ev int64) []int64 {
	t.Helper()
	r := c.DoPatiently("GET", fmt.Sprintf("/api/v1/events/%d/seats", ev), nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var page struct{ Items []events.Seat }
	r.JSON(t, &page)
	ids := make([]int64, len(page.Items))
	for i, s := range page.Items {
		ids[i] = s.SeatID
	}
	require.Len(t, ids, jepsenSeats)
	return ids
}

func hotOption(t *testing.T, admin *systest.Client, code string) int64 {
	t.Helper()
	r := admin.DoPatiently("POST", "/api/v1/products", map[string]any{"name": "product " + code,
		"options": []map[string]any{{"optionCode": code, "price": 1000, "stockQuantity": jepsenStock, "isActive": true}}})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var p struct {
		Options []struct {
			ProductOptionID int64 `json:"productOptionId"`
		} `json:"options"`
	}
	r.JSON(t, &p)
	require.Len(t, p.Options, 1)
	return p.Options[0].ProductOptionID
}

// shopUser creates a shop user and returns its id as a token's sub.
func shopUser(t *testing.T, admin *systest.Client, name string) string {
	t.Helper()
	r := admin.DoPatiently("POST", "/api/v1/users", map[string]any{"name": name})
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	var u shop.User
	r.JSON(t, &u)
	return strconv.FormatInt(u.UserID, 10)
}

func (l *jepsenLoad) stopped() bool {
	select {
	case <-l.quit:
		return true
	default:
		return false
	}
}

// stop ends the workload: no client starts another operation, and each
// ends the one it is in, which lincheck.Await bounds.
func (l *jepsenLoad) stop() {
	select {
	case <-l.quit:
		return
	default:
		close(l.quit)
	}
	ended := make(chan struct{})
	go func() { l.done.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(2*lincheck.Patience + 30*time.Second):
		l.t.Errorf("the clients did not end their last operations")
	}
}

// pause is a client's back-off after an answer that was not an outcome.
func (l *jepsenLoad) pause() {
	select {
	case <-l.quit:
	case <-time.After(jepsenBackoff):
	}
}

// fcfsClient grabs seats of event ev, as new users mostly, sometimes as a
// user of its own who already won one (ALREADY_RESERVED, or 429 within
// the duplicate window), and lists the free seats.
func (l *jepsenLoad) fcfsClient(client int, ev int64) {
	key := events.EventKey(ev)
	rng := rand.New(rand.NewPCG(uint64(client), uint64(ev)))
	var won []string
	for !l.stopped() {
		switch x := rng.IntN(10); {
		case x == 0:
			l.listSeats(client, key, ev)
		case x == 1 && len(won) > 0:
			l.grab(client, key, ev, won[rng.IntN(len(won))])
		default:
			user := fmt.Sprintf("fan%d", l.nextID.Add(1))
			if l.grab(client, key, ev, user).Status == lincheck.StatusOK {
				won = append(won, user)
			}
		}
	}
}

func (l *jepsenLoad) grab(client int, key string, ev int64, user string) lincheck.Outcome {
	sent := time.Now()
	a := awaitOutcome(l.client(user, domain.RoleUser), "POST", fmt.Sprintf("/api/v1/events/%d/seats/fcfs", ev))
	out := a.Outcome
	switch {
	case out.Status == lincheck.StatusOK:
		var res events.FCFSResult
		l.decode(a.Result, &res)
		out.Value = res.SeatID
	case out.Code == domain.CodeAlreadyReserved:
		if seat, ok := a.Meta["seatId"].(float64); ok {
			out.Value = int64(seat)
		}
	}
	l.record(l.seats, client, key, sent, lincheck.Grab{User: user}, out, user, events.TypeFCFS)
	return out
}

// jepsenRetryPace is how long a client waits before it sends a write
// again that got no answer.
const jepsenRetryPace = 200 * time.Millisecond

// awaitOutcome is lincheck.Await for a client that sends each write with an
// Idempotency-Key and, when no answer came back (a transport error: its
// API killed mid-exchange, the balancer's 502), sends it again with the
// same key until an answer is an outcome, for up to lincheck.Patience: the
// key makes each try the same write, so the client learns that write's
// outcome instead of leaving it unknown. Once a try got no answer, a later
// try refused at the door (a 503, or 429 DUPLICATE_REQUEST while the first
// try holds the duplicate window) says nothing of the first: it is sent
// again too, and is unknown if the patience runs out. An answer at the
// door to the first try is final: the client was told the write was not
// stored.
func awaitOutcome(c *systest.Client, method, path string) lincheck.Answer {
	key := uuid.NewString()
	deadline := time.Now().Add(lincheck.Patience)
	for try := 1; ; try++ {
		a := lincheck.Await(c, method, path, map[string]any{}, api.IdempotencyHeader, key)
		noAnswer := a.Status == lincheck.StatusUnknown && a.RequestID == ""
		if !noAnswer && (try == 1 || a.Status != lincheck.StatusNotAccepted) {
			return a
		}
		if time.Now().After(deadline) {
			return lincheck.Answer{Outcome: lincheck.Unknown()}
		}
		time.Sleep(jepsenRetryPace) // a client's pace, not a wait for anything
	}
}

// listSeats reads the event's free seats; a read that gets no answer is
// not recorded (it says nothing), only counted.
func (l *jepsenLoad) listSeats(client int, key string, ev int64) {
	sent := time.Now()
	r, err := l.client("watcher", domain.RoleUser).TryDo("GET", fmt.Sprintf("/api/v1/events/%d/seats?status=available", ev), nil)
	if err != nil || r.Status != http.StatusOK {
		l.noAnswer()
		return
	}
	var page struct{ Items []events.Seat }
	l.decode(r.Body, &page)
	ids := make([]int64, len(page.Items))
	for i, s := range page.Items {
		ids[i] = s.SeatID
	}
	l.record(l.seats, client, key, sent, lincheck.ListSeats{}, lincheck.OK(ids), "", "")
}

// shopClient is one user with a cart of units of option opt: it reserves
// it, then releases the reservation or, one time in jepsenConfirmEvery,
// confirms it (the line then leaves the cart, which it puts back), and
// reads the option's stock now and then.
func (l *jepsenLoad) shopClient(client int, user string, opt int64, units int) {
	key := shop.OptionKey(opt)
	c := l.client(user, domain.RoleUser)
	rng := rand.New(rand.NewPCG(uint64(client), uint64(opt)))
	inCart := false
	for !l.stopped() {
		if rng.IntN(5) == 0 {
			l.readStock(client, c, key, opt)
		}
		if !inCart {
			if inCart = l.fillCart(c, opt, units); !inCart {
				continue
			}
		}
		out := l.shopWrite(client, c, key, "POST", "/api/v1/orders/reserve", lincheck.Reserve{User: user, Units: units}, shop.TypeReserve)
		if out.Status != lincheck.StatusOK && out.Status != lincheck.StatusUnknown && out.Code != domain.CodeDuplicateReservation {
			continue
		}
		if rng.IntN(jepsenConfirmEvery) == 0 {
			l.shopWrite(client, c, key, "POST", "/api/v1/orders", lincheck.Confirm{User: user}, shop.TypeConfirm)
			inCart = false // a confirmed line leaves the cart; put it back whatever the outcome
		} else {
			l.shopWrite(client, c, key, "DELETE", "/api/v1/orders/reserve", lincheck.Release{User: user}, shop.TypeRelease)
		}
	}
}

// fillCart sets the user's cart to units of opt (a synchronous write, not
// part of the model: a reserve covers the cart as the API read it).
func (l *jepsenLoad) fillCart(c *systest.Client, opt int64, units int) bool {
	r, err := c.TryDo("PUT", fmt.Sprintf("/api/v1/cart/items/%d", opt), map[string]any{"quantity": units})
	if err != nil || r.Status != http.StatusOK {
		l.pause()
		return false
	}
	return true
}

// shopWrite sends a reserve, confirm or release, follows it to its
// outcome and records it, with the value the stock model reads.
func (l *jepsenLoad) shopWrite(client int, c *systest.Client, key, method, path string, op any, reqType string) lincheck.Outcome {
	sent := time.Now()
	a := awaitOutcome(c, method, path)
	out := a.Outcome
	if out.Status == lincheck.StatusOK {
		var res struct {
			Reservations []shop.Reservation `json:"reservations"`
			Lines        []shop.OrderLine   `json:"lines"`
			Released     *int               `json:"released"`
		}
		l.decode(a.Result, &res)
		switch {
		case len(res.Reservations) == 1:
			out.Value = res.Reservations[0].AvailableStock
		case len(res.Lines) == 1:
			out.Value = res.Lines[0].Quantity
		case res.Released != nil:
			out.Value = *res.Released
		default:
			l.t.Errorf("%v: a result the stock model cannot read: %s", op, a.Result)
		}
	}
	l.record(l.stock, client, key, sent, op, out, c.User, reqType)
	return out
}

func (l *jepsenLoad) readStock(client int, c *systest.Client, key string, opt int64) {
	sent := time.Now()
	r, err := c.TryDo("GET", fmt.Sprintf("/api/v1/product-options/%d/stock", opt), nil)
	if err != nil || r.Status != http.StatusOK {
		l.noAnswer()
		return
	}
	var st shop.Stock
	l.decode(r.Body, &st)
	level := lincheck.StockLevel{Stock: st.StockQuantity, Reserved: st.ReservedQuantity, Available: st.AvailableStock}
	l.record(l.stock, client, key, sent, lincheck.ReadStock{}, lincheck.OK(level), "", "")
}

// decode reads an answer's JSON body into v; one it cannot read fails the
// test, and the client goes on (a client's goroutine may not end the test).
func (l *jepsenLoad) decode(body []byte, v any) {
	if err := json.Unmarshal(body, v); err != nil {
		l.t.Errorf("an answer the workload cannot read: %v: %s", err, body)
	}
}

// noAnswer counts a read that got no answer and backs off.
func (l *jepsenLoad) noAnswer() {
	l.mu.Lock()
	l.unanswered++
	l.mu.Unlock()
	l.pause()
}

// record adds an operation, answered now, to rec; user and reqType name a
// write's request (empty for a read), for the scan of writes answered at
// the door.
func (l *jepsenLoad) record(rec *lincheck.Recorder, client int, key string, sent time.Time, op any, out lincheck.Outcome, user, reqType string) {
	now := time.Now()
	rec.RecordAt(client, key, sent, now, op, out)
	l.mu.Lock()
	l.ops++
	l.counts[out.Status]++
	if out.Code != "" {
		l.codes[out.Code]++
	}
	if out.RequestID != "" {
		l.known[out.RequestID] = true
	}
	if reqType != "" && (out.Status == lincheck.StatusNotAccepted || (out.Status == lincheck.StatusUnknown && out.RequestID == "")) {
		l.unseen = append(l.unseen, unseenWrite{client: client, key: key, user: user, reqType: reqType, op: op,
			told: out.Status, code: out.Code, sent: sent, learnt: now})
	}
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
	if out.Status == lincheck.StatusNotAccepted {
		l.pause()
	}
}

// count is the number of operations recorded so far.
func (l *jepsenLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ops
}

// waitOps waits until n operations are recorded, failing the test after
// timeout.
func (l *jepsenLoad) waitOps(n int, timeout time.Duration) {
	l.t.Helper()
	deadline := time.After(timeout)
	for {
		l.mu.Lock()
		ops, changed := l.ops, l.changed
		l.mu.Unlock()
		if ops >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			l.t.Fatalf("%d operations recorded in %s, want %d", ops, timeout, n)
		}
	}
}

// ghostWrite is a write its client was told was not stored, found in
// Postgres.
type ghostWrite struct {
	unseenWrite
	stored
}

// stored is a request as Postgres holds it.
type stored struct {
	id, user, reqType, status string
	acceptedAt                time.Time
	completedAt               *time.Time
	outcome                   string // result or error, as stored
}

func (s stored) String() string {
	done := "not yet"
	if s.completedAt != nil {
		done = s.completedAt.UTC().Format("15:04:05.000")
	}
	return fmt.Sprintf("request %s (%s of user %s), accepted %s by Postgres' clock, %s %s: %s",
		s.id, s.reqType, s.user, s.acceptedAt.UTC().Format("15:04:05.000"), s.status, done, s.outcome)
}

func (g ghostWrite) String() string {
	return fmt.Sprintf("%v on %s: sent %s, answered %s at %s (%s later); yet stored: %s",
		g.op, g.key, g.sent.UTC().Format("15:04:05.000"), g.code, g.learnt.UTC().Format("15:04:05.000"),
		g.learnt.Sub(g.sent).Round(time.Millisecond), g.stored)
}

// jepsenTypes are the write types of the workload.
var jepsenTypes = []string{events.TypeFCFS, shop.TypeReserve, shop.TypeConfirm, shop.TypeRelease}

// ghosts reads the workload's requests that no client learnt of and
// accounts for each by the write it came from: the last write of its user
// and type sent before Postgres stamped it accepted among those answered
// at the door (a ghost: its client was told it was not stored) or never
// answered (an unknown outcome, which may have taken effect). The stamp is
// Postgres' clock when the INSERT ran, which for a write held up by a
// frozen server is after its client's answer. A request no such write
// accounts for is an orphan, described.
func (l *jepsenLoad) ghosts() (ghosts []ghostWrite, orphans []string) {
	t := l.t
	known := make([]string, 0, len(l.known))
	for id := range l.known {
		known = append(known, id)
	}
	rows, err := l.r.s.Pool.Query(context.Background(), `SELECT id::text, user_id, type, status, accepted_at, completed_at,
			coalesce(result::text, error::text, '')
		FROM requests WHERE type = ANY($1) AND NOT (id::text = ANY($2)) ORDER BY seq`, jepsenTypes, known)
	require.NoError(t, err)
	var unknown []stored
	for rows.Next() {
		var s stored
		require.NoError(t, rows.Scan(&s.id, &s.user, &s.reqType, &s.status, &s.acceptedAt, &s.completedAt, &s.outcome))
		unknown = append(unknown, s)
	}
	require.NoError(t, rows.Err())
	for _, s := range unknown {
		w, ok := l.sourceOf(s)
		switch {
		case !ok:
			orphans = append(orphans, s.String())
		case w.told == lincheck.StatusNotAccepted:
			ghosts = append(ghosts, ghostWrite{unseenWrite: w, stored: s})
		}
	}
	return ghosts, orphans
}

// sourceOf is the write stored became: the last unseen write of its user
// and type sent before it was stamped accepted (a second's leeway for the
// two clocks).
func (l *jepsenLoad) sourceOf(s stored) (unseenWrite, bool) {
	var best unseenWrite
	found := false
	for _, w := range l.unseen {
		if w.user == s.user && w.reqType == s.reqType && !w.sent.After(s.acceptedAt.Add(time.Second)) &&
			(!found || w.sent.After(best.sent)) {
			best, found = w, true
		}
	}
	return best, found
}
