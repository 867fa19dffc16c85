package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/events"
	"github.com/holdfast/holdfast/internal/lincheck"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/shop"
	"github.com/holdfast/holdfast/stays"
)

// The histories of this file are recorded against a real system on a quiet
// machine and checked for linearizability with Porcupine
// (internal/lincheck): every operation's send and answer times as its
// client saw them, a few hot keys, each key's history checked against its
// model. The fault histories (make jepsen) use the same recorder and models.

// runClients runs body for clients 0..n-1 at once and waits for them.
func runClients(n int, body func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { body(i) })
	}
	wg.Wait()
}

// outcomeTally counts a history's outcomes by status and code, for the log and
// for the test's own check that the history exercised something.
type outcomeTally struct {
	mu sync.Mutex
	n  map[string]int
}

func (t *outcomeTally) add(o lincheck.Outcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[string]int{}
	}
	k := string(o.Status)
	if o.Code != "" {
		k += " " + o.Code
	}
	t.n[k]++
}

func (t *outcomeTally) get(k string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n[k]
}

// recordRead records a synchronous read: GET path decoded into v and turned
// into the outcome by value; a read that got no 200 is not recorded (it
// saw nothing).
func recordRead[V any](t *testing.T, rec *lincheck.Recorder, client int, c *systest.Client, key, path string, op any, value func(V) any) {
	sent := time.Now()
	r, err := c.TryDo("GET", path, nil)
	if err != nil || r.Status != http.StatusOK {
		return
	}
	var v V
	r.JSON(t, &v)
	rec.Record(client, key, sent, op, lincheck.OK(value(v)))
}

// recordWrite sends a write and follows it to its outcome (lincheck.Await),
// reads a succeeded result with value, and records it.
func recordWrite(t *testing.T, rec *lincheck.Recorder, tl *outcomeTally, client int, c *systest.Client, key string, op any,
	method, path string, body any, value func(a lincheck.Answer) any) lincheck.Outcome {
	sent := time.Now()
	a := lincheck.Await(c, method, path, body)
	o := a.Outcome
	if o.Status == lincheck.StatusOK || o.Status == lincheck.StatusRefused {
		o.Value = value(a)
	}
	rec.Record(client, key, sent, op, o)
	tl.add(o)
	return o
}

// resultAs decodes a succeeded write's result.
func resultAs[V any](t *testing.T, a lincheck.Answer) V {
	var v V
	require.NoError(t, json.Unmarshal(a.Result, &v), "%s", a.Result)
	return v
}

// metaID is a refusal's meta number, or nil.
func metaID(a lincheck.Answer, name string) any {
	if f, ok := a.Meta[name].(float64); ok {
		return int64(f)
	}
	return nil
}

// Model 2, FCFS seats: 24 clients on two events of 40 seats, each round a
// grab by a new user, the same user's grab again, and a seat list.
func TestLinearizableFCFS(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 2, Overrides: []string{"RATE_LIMIT_PER_USER", "0", "DUPLICATE_WINDOW", "0s"}})
	const clients, rounds, seatCount = 24, 8, 40
	admin := s.Client("admin", domain.RoleAdmin)
	var evs []int64
	seats := map[string][]int64{}
	for range 2 {
		e := newEvent(t, s, map[string]any{"name": "Linearizable", "seatCount": seatCount})
		var list struct{ Items []events.Seat }
		admin.Do("GET", fmt.Sprintf("/api/v1/events/%d/seats", e.EventID), nil).JSON(t, &list)
		for _, st := range list.Items {
			seats[events.EventKey(e.EventID)] = append(seats[events.EventKey(e.EventID)], st.SeatID)
		}
		evs = append(evs, e.EventID)
	}
	rec, tl := lincheck.NewRecorder(), &outcomeTally{}
	runClients(clients, func(i int) {
		ev := evs[i%len(evs)]
		key, path := events.EventKey(ev), fmt.Sprintf("/api/v1/events/%d/seats/fcfs", ev)
		seat := func(a lincheck.Answer) any {
			if a.Status == lincheck.StatusRefused {
				return metaID(a, "seatId")
			}
			return resultAs[events.FCFSResult](t, a).SeatID
		}
		for r := range rounds {
			user := fmt.Sprintf("lc%02d-%d", i, r)
			c := s.Client(user, domain.RoleUser)
			for range 2 {
				recordWrite(t, rec, tl, i, c, key, lincheck.Grab{User: user}, "POST", path, nil, seat)
			}
			recordRead(t, rec, i, c, key, fmt.Sprintf("/api/v1/events/%d/seats?status=available", ev), lincheck.ListSeats{},
				func(l struct{ Items []events.Seat }) any {
					ids := []int64{}
					for _, st := range l.Items {
						ids = append(ids, st.SeatID)
					}
					return ids
				})
		}
	})
	t.Logf("outcomes: %v", tl.n)
	require.Equal(t, 2*seatCount, tl.get("ok"), "every seat given")
	require.Positive(t, tl.get("refused "+domain.CodeSoldOut))
	require.Positive(t, tl.get("refused "+domain.CodeAlreadyReserved))
	rec.Check(t, lincheck.FCFS(seats), "fcfs")
}

// Model 1, the stock counter: 16 shoppers on two options of 30 units,
// each round putting 1–3 units in the cart, reserving them, then
// confirming (every other round) or releasing, and reading the stock;
// halfway through the stock runs out and reserves are refused.
func TestLinearizableShopStock(t *testing.T) {
	t.Parallel()
	s := systest.Start(t, systest.Options{Workers: 2, Overrides: []string{"RATE_LIMIT_PER_USER", "0"}})
	const clients, rounds, units = 16, 10, 30
	options := newProduct(t, s, units, units)
	stock := map[string]int{}
	for _, o := range options {
		stock[shop.OptionKey(o)] = units
	}
	shoppers := make([]shopper, clients)
	for i := range shoppers {
		shoppers[i] = newShopper(t, s, fmt.Sprintf("lc%02d", i))
	}
	rec, tl := lincheck.NewRecorder(), &outcomeTally{}
	runClients(clients, func(i int) {
		sh, option := shoppers[i], options[i%len(options)]
		key, user := shop.OptionKey(option), strconv.FormatInt(shoppers[i].id, 10)
		body := map[string]int64{"userId": sh.id}
		for r := range rounds {
			k := 1 + (i+r)%3
			sh.put(option, k) // the user's own cart: not the option's state
			o := recordWrite(t, rec, tl, i, sh.Client, key, lincheck.Reserve{User: user, Units: k}, "POST", "/api/v1/orders/reserve", body,
				func(a lincheck.Answer) any {
					if a.Status == lincheck.StatusRefused {
						return nil
					}
					return resultAs[struct{ Reservations []shop.Reservation }](t, a).Reservations[0].AvailableStock
				})
			if o.Status == lincheck.StatusOK && (i+r)%2 == 0 {
				recordWrite(t, rec, tl, i, sh.Client, key, lincheck.Confirm{User: user}, "POST", "/api/v1/orders", body,
					func(a lincheck.Answer) any {
						if a.Status == lincheck.StatusRefused {
							return nil
						}
						return resultAs[shop.Order](t, a).Lines[0].Quantity
					})
			} else {
				recordWrite(t, rec, tl, i, sh.Client, key, lincheck.Release{User: user}, "DELETE", "/api/v1/orders/reserve", body,
					func(a lincheck.Answer) any { return resultAs[struct{ Released int }](t, a).Released })
			}
			recordRead(t, rec, i, sh.Client, key, fmt.Sprintf("/api/v1/product-options/%d/stock", option), lincheck.ReadStock{},
				func(st shop.Stock) any {
					return lincheck.StockLevel{Stock: st.StockQuantity, Reserved: st.ReservedQuantity, Available: st.AvailableStock}
				})
		}
	})
	t.Logf("outcomes: %v", tl.n)
	require.Positive(t, tl.get("ok"))
	require.Positive(t, tl.get("refused "+domain.CodeInsufficientStock), "the stock ran out")
	rec.Check(t, lincheck.Stock(stock), "stock")
}

// Model 3, a room type's night: 8 clients on two room types of 4 rooms,
// one night, HOLD_TTL 1 s; each round a hold, then a reuse and a cancel, a
// confirm (two stays a room type) or a cancel, or a confirm once the hold
// has lapsed, and a read of the night's availability.
func TestLinearizableRoomNight(t *testing.T) {
	t.Parallel()
	const clients, rounds, rooms, ttl = 8, 6, 4, time.Second
	s := systest.Start(t, systest.Options{Workers: 2, Overrides: []string{"RATE_LIMIT_PER_USER", "0", "HOLD_TTL", ttl.String()}})
	staff := s.Client("staff", domain.RoleStaff)
	var hotel stays.Hotel
	staff.Do("POST", "/api/v1/hotels", map[string]string{"name": "Linearizable", "timezone": "UTC", "currency": "KRW"}).JSON(t, &hotel)
	in, out := stayDates(1)
	var types []int64
	counts := map[string]int{}
	for n := range 2 {
		var rt stays.RoomType
		staff.Do("POST", fmt.Sprintf("/api/v1/hotels/%d/room-types", hotel.HotelID), map[string]string{"name": fmt.Sprint("Type ", n)}).JSON(t, &rt)
		for i := range rooms {
			r := staff.Do("POST", fmt.Sprintf("/api/v1/hotels/%d/rooms", hotel.HotelID), map[string]any{"roomTypeId": rt.RoomTypeID, "number": fmt.Sprint(n, i)})
			require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		}
		types = append(types, rt.RoomTypeID)
		counts[stays.SerialKey(rt.RoomTypeID)+":"+in] = rooms
	}
	rec, tl := lincheck.NewRecorder(), &outcomeTally{}
	runClients(clients, func(i int) {
		rt := types[i%len(types)]
		key, user := stays.SerialKey(rt)+":"+in, fmt.Sprintf("lc-stay%02d", i)
		c, reader := s.Client(user, domain.RoleUser), s.Client("staff", domain.RoleStaff)
		nothing := func(lincheck.Answer) any { return nil }
		holdFor := func(clientKey string) lincheck.Outcome {
			return recordWrite(t, rec, tl, i, c, key, lincheck.PlaceHold{User: user}, "POST", "/api/v1/holds",
				stays.CreatePayload{RoomTypeID: rt, CheckIn: in, CheckOut: out, ClientHoldKey: clientKey},
				func(a lincheck.Answer) any {
					if a.Status == lincheck.StatusRefused {
						return nil
					}
					h := resultAs[stays.Hold](t, a)
					return lincheck.HoldGrant{ID: h.HoldID, ExpiresAt: h.ExpiresAt, Reused: h.Reused}
				})
		}
		for r := range rounds {
			clientKey := uuid.NewString()
			o := holdFor(clientKey)
			if g, ok := o.Value.(lincheck.HoldGrant); ok {
				path := "/api/v1/holds/" + g.ID
				switch {
				case r%3 == 0:
					holdFor(clientKey) // the same hold again: reused, its expiry pushed back
					recordWrite(t, rec, tl, i, c, key, lincheck.CancelHold{User: user, Hold: g.ID}, "DELETE", path, nil, nothing)
				case r == 1 && i < 6: // three stays a room type: its last room is held for
					recordWrite(t, rec, tl, i, c, key, lincheck.ConfirmHold{User: user, Hold: g.ID}, "POST", path+"/confirm", nil, nothing)
				case r%3 == 1:
					recordWrite(t, rec, tl, i, c, key, lincheck.CancelHold{User: user, Hold: g.ID}, "DELETE", path, nil, nothing)
				default:
					// Only the clock passing the expiry can show the hold lapse.
					time.Sleep(time.Until(g.ExpiresAt) + 5*time.Millisecond)
					recordWrite(t, rec, tl, i, c, key, lincheck.ConfirmHold{User: user, Hold: g.ID}, "POST", path+"/confirm", nil, nothing)
				}
			}
			recordRead(t, rec, i, reader, key, fmt.Sprintf("/api/v1/hotels/%d/availability?from=%s&to=%s&roomTypeId=%d", hotel.HotelID, in, out, rt),
				lincheck.ReadNight{}, func(a stays.HotelAvailability) any {
					it := a.Items[0]
					return lincheck.NightCounts{Reserved: int(it.UnavailableRooms), Held: int(it.HeldRooms), Available: int(it.AvailableRooms)}
				})
		}
	})
	t.Logf("outcomes: %v", tl.n)
	require.Positive(t, tl.get("refused "+domain.CodeNotAvailable))
	require.Positive(t, tl.get("refused "+domain.CodeHoldExpired))
	rec.Check(t, lincheck.RoomNight(counts, ttl), "room night")
}

// recordCall records a synchronous write or read: its answer turned into
// an outcome by outcome; a transport error is an unknown outcome.
func recordCall(rec *lincheck.Recorder, tl *outcomeTally, client int, c *systest.Client, key string, op any,
	method, path string, outcome func(systest.Response) lincheck.Outcome) lincheck.Outcome {
	sent := time.Now()
	o := lincheck.Unknown()
	if r, err := c.TryDo(method, path, nil); err == nil {
		o = outcome(r)
	}
	rec.Record(client, key, sent, op, o)
	tl.add(o)
	return o
}

// placeOf is the waiting room's status as the model reads it.
func placeOf(st events.Status) lincheck.Place {
	p := lincheck.Place{Status: st.Status, Rank: -1}
	if st.Rank != nil {
		p.Rank = int(*st.Rank)
	}
	return p
}

// Model 4, the waiting room: 10 clients on two events of maxConcurrent 2;
// each enters, polls its status, takes a token when ready (and asks once
// while waiting, mostly to be refused), leaves once entered, and enters
// again at the back, until they have made 300 operations.
func TestLinearizableWaitingRoom(t *testing.T) {
	t.Parallel()
	const clients, budget, slots = 10, 30, 2
	s := systest.Start(t, systest.Options{Workers: 2, Overrides: []string{"RATE_LIMIT_PER_USER", "0"}})
	var evs []int64
	max := map[string]int{}
	for range 2 {
		e := newEvent(t, s, map[string]any{"name": "Linearizable", "seatCount": 1, "maxConcurrent": slots,
			"tokenTtlSeconds": 3600, "presenceTimeoutSeconds": 3600, "claimWindowSeconds": 3600})
		evs = append(evs, e.EventID)
		max[events.QueueKey(e.EventID)] = slots
	}
	rec, tl := lincheck.NewRecorder(), &outcomeTally{}
	runClients(clients, func(i int) {
		ev := evs[i%len(evs)]
		key, user := events.QueueKey(ev), fmt.Sprintf("lc-room%02d", i)
		c, base := s.Client(user, domain.RoleUser), fmt.Sprintf("/api/v1/events/%d/queue", ev)
		enter := func() {
			recordWrite(t, rec, tl, i, c, key, lincheck.Enter{User: user}, "POST", base, nil,
				func(a lincheck.Answer) any { return placeOf(resultAs[events.Status](t, a)) })
		}
		status := func() lincheck.Place {
			o := recordCall(rec, tl, i, c, key, lincheck.QueueStatus{User: user}, "GET", base+"/status", func(r systest.Response) lincheck.Outcome {
				if r.Status != http.StatusOK {
					return lincheck.NotAccepted(r.ErrorCode(t))
				}
				var st events.Status
				r.JSON(t, &st)
				return lincheck.OK(placeOf(st))
			})
			p, _ := o.Value.(lincheck.Place)
			return p
		}
		token := func() {
			recordCall(rec, tl, i, c, key, lincheck.TakeToken{User: user}, "POST", base+"/token", func(r systest.Response) lincheck.Outcome {
				var e systest.Envelope
				switch r.JSON(t, &e); {
				case r.Status == http.StatusOK:
					return lincheck.OK(nil)
				case e.Error.Code != domain.CodeNotYourTurn:
					return lincheck.NotAccepted(e.Error.Code)
				}
				p := lincheck.Place{Status: fmt.Sprint(e.Error.Meta["status"]), Rank: -1}
				if r, ok := e.Error.Meta["rank"].(float64); ok {
					p.Rank = int(r)
				}
				return lincheck.Refused(e.Error.Code, p)
			})
		}
		enter()
		asked := false // for a token while waiting
		for rec.Len() < clients*budget {
			switch p := status(); p.Status {
			case "ready":
				token()
			case "waiting":
				if !asked {
					token()
					asked = true
					continue
				}
				// A waiting client's polling pace.
				time.Sleep(10 * time.Millisecond)
			case "entered":
				recordCall(rec, tl, i, c, key, lincheck.LeaveRoom{User: user}, "DELETE", base+"/token", func(r systest.Response) lincheck.Outcome {
					if r.Status != http.StatusOK {
						return lincheck.NotAccepted(r.ErrorCode(t))
					}
					return lincheck.OK(nil)
				})
				enter()
				asked = false
			default:
				t.Errorf("%s: status %s", user, p)
				return
			}
		}
	})
	t.Logf("outcomes: %v", tl.n)
	require.Positive(t, tl.get("refused "+domain.CodeNotYourTurn))
	rec.Check(t, lincheck.WaitingRoom(max), "waiting room")
}

// The availability read across confirms (SPEC §4.2, docs/stays.md: counts
// exact at every instant). Four clients hold and confirm rooms one after
// another while four read the night in a loop. Found by this history: the
// read took the stays from Postgres, then the holds from Redis, and a
// confirm committed its stays in between and removed their holds once
// committed, so the read counted a confirmed room as neither stayed nor
// held and showed it free ("reserved 4 held 0 available 76" while 72 were
// free; 4 of 4 runs failed). Reading Redis first then showed a batch's
// confirms without its new hold while a concurrent read showed the hold
// without the confirms (1 of 3 runs); Availability.Hotel now reads again
// when a batch wrote between its reads (stays/availability_order_test.go
// forces both interleavings).
func TestLinearizableStaysReadAcrossConfirm(t *testing.T) {
	t.Parallel()
	const writers, readers, rooms, ttl = 4, 4, 80, time.Minute
	s := systest.Start(t, systest.Options{Workers: 2, Overrides: []string{"RATE_LIMIT_PER_USER", "0", "HOLD_TTL", ttl.String()}})
	staff := s.Client("staff", domain.RoleStaff)
	var hotel stays.Hotel
	staff.Do("POST", "/api/v1/hotels", map[string]string{"name": "Probe", "timezone": "UTC", "currency": "KRW"}).JSON(t, &hotel)
	in, out := stayDates(1)
	var rt stays.RoomType
	staff.Do("POST", fmt.Sprintf("/api/v1/hotels/%d/room-types", hotel.HotelID), map[string]string{"name": "Probe"}).JSON(t, &rt)
	for i := range rooms {
		r := staff.Do("POST", fmt.Sprintf("/api/v1/hotels/%d/rooms", hotel.HotelID), map[string]any{"roomTypeId": rt.RoomTypeID, "number": fmt.Sprint(i)})
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	}
	key := stays.SerialKey(rt.RoomTypeID) + ":" + in
	availability := fmt.Sprintf("/api/v1/hotels/%d/availability?from=%s&to=%s&roomTypeId=%d", hotel.HotelID, in, out, rt.RoomTypeID)
	rec, tl := lincheck.NewRecorder(), &outcomeTally{}
	done := make(chan struct{})
	reading := make(chan struct{})
	go func() {
		defer close(reading)
		runClients(readers, func(i int) {
			reader := s.Client("staff", domain.RoleStaff)
			for {
				select {
				case <-done:
					return
				default:
				}
				recordRead(t, rec, writers+i, reader, key, availability, lincheck.ReadNight{}, func(a stays.HotelAvailability) any {
					it := a.Items[0]
					return lincheck.NightCounts{Reserved: int(it.UnavailableRooms), Held: int(it.HeldRooms), Available: int(it.AvailableRooms)}
				})
			}
		})
	}()
	runClients(writers, func(i int) {
		for r := range rooms / writers {
			user := fmt.Sprintf("probe%d-%d", i, r)
			c := s.Client(user, domain.RoleUser)
			o := recordWrite(t, rec, tl, i, c, key, lincheck.PlaceHold{User: user}, "POST", "/api/v1/holds",
				stays.CreatePayload{RoomTypeID: rt.RoomTypeID, CheckIn: in, CheckOut: out, ClientHoldKey: uuid.NewString()},
				func(a lincheck.Answer) any {
					h := resultAs[stays.Hold](t, a)
					return lincheck.HoldGrant{ID: h.HoldID, ExpiresAt: h.ExpiresAt, Reused: h.Reused}
				})
			if g, ok := o.Value.(lincheck.HoldGrant); ok {
				recordWrite(t, rec, tl, i, c, key, lincheck.ConfirmHold{User: user, Hold: g.ID}, "POST", "/api/v1/holds/"+g.ID+"/confirm", nil,
					func(lincheck.Answer) any { return nil })
			}
		}
	})
	close(done)
	<-reading
	t.Logf("outcomes: %v", tl.n)
	rec.Check(t, lincheck.RoomNight(map[string]int{key: rooms}, ttl), "stays read across confirm")
}
