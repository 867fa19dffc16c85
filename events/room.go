package events

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/keyed"
)

// QueueKey is the serialization key of an event's waiting-room entries.
func QueueKey(id int64) string { return "events:q:" + strconv.FormatInt(id, 10) }

// Room is an event's waiting room in Redis (seed 003, SPEC §6.1, §6.3 and
// issue 49). Every key of an event shares the hash slot of its queue's
// lease, so one script sees them all on Redis Cluster too:
//
//	hf:{events:q:7}:cfg      hash: the admission settings (Configure)
//	hf:{events:q:7}:queue    sorted set member → place: who is in line, in order
//	hf:{events:q:7}:seen     sorted set member → last sign of life (ms), within the presence timeout
//	hf:{events:q:7}:away     sorted set member → place: in line, silent for longer than that
//	hf:{events:q:7}:claim    sorted set member → claim deadline (ms) of a ready user
//	hf:{events:q:7}:tokens   sorted set member → expiry (ms): entry tokens
//	hf:{events:q:7}:admits   sorted set "member:µs" → µs: admissions of the last minute
//	hf:{events:q:7}:expired  sorted set member → when it lost its place (ms), for an hour
//
// A member is the user's pseudonym (package draw). A place is the entry's
// acceptance seq, or 0 for a pre-queue entrant: equal places sort by
// member, which is the published shuffle. A user in line is in seen or in
// away, never both.
//
// Counts are exact at every instant with no sweeper: every script first
// takes out what has lapsed at Redis's own clock (one clock for every API
// and worker): tokens and admissions past their time leave the counts,
// and users who would hold the line up leave it (and are remembered as
// expired, below). Each user is taken out once, so this costs O(1) per
// user over a room's life. Only then does the script rank, count or admit.
// A user may take a token while its rank is below the free slots:
// maxConcurrent minus valid tokens, and, with admitPerMinute, that rate
// minus the admissions of the last rolling minute, whichever is less; none
// while the pre-queue is not sealed or admissions are paused.
//
// Presence matters only near the front (issue 49: a phone that switches
// apps sends nothing). The rule, at every script:
//   - a user silent for longer than presenceTimeout is away: it keeps its
//     place; any sign of life (poll, token request, open stream, entering
//     again) makes it present again, at that place;
//   - an away user whose rank is below free slots + presenceLookahead (10:
//     its turn, or one of the next ten after the free slots) is passed
//     over: it loses its place (expired); users further back are never
//     taken out for silence, and nobody is while admissions are paused or
//     the pre-queue is not sealed (nobody's turn can come: the first script
//     after they resume applies the rule);
//   - a ready user told its turn that has not taken its token by claimBy
//     loses its place.
//
// So a returning user has its place back unless the line reached it while
// it was away (it came within the look-ahead after more than presenceTimeout
// of silence) or its turn came and its claim window passed. A passed-over
// user is not parked for later: come back to a place ahead of users who
// moved up, it would take the turn of a present user already told "ready".
//
// Why the liveness bound of SPEC §6.1 (ceil(K/M) claim windows plus one
// presence timeout) still holds: after every script, none of the first
// free + presenceLookahead users in line is away — passing the first away
// user over may bring the next into the window, and the script goes on
// until the first one left is beyond it. A present user P can be ready only
// at a rank below the free slots, and then every user ahead of it is inside
// that window: an abandoned user ahead of P is gone presenceTimeout after
// its last sign of life, or, if that was long ago, in the script in which
// the line reaches it, all of them at once; one that polls but never claims
// holds a slot for its claim window, M at a time. The users ahead of P are
// judged exactly as before issue 49; only users behind the window, who
// hold nobody up, are spared. The bound needs no look-ahead (0 would hold
// it); the ten make the ranks and ETAs of the next ten true (no away user
// ahead of them), and keep those about to be told "your turn" present.
// Larger would take more places from phones only briefly away.
//
// Bounds: queue, seen, away and claim hold the users in line; tokens at
// most maxConcurrent; admits at most a minute of admissions; expired the
// users who lost their place within the last hour.
type Room struct {
	rdb    redis.UniversalClient
	secret []byte
	// Admissions and Expirations count what this process's scripts did
	// (holdfast_waiting_room_admissions_total,
	// holdfast_waiting_room_expirations_total{reason}).
	Admissions  prometheus.Counter
	Expirations *prometheus.CounterVec
}

// NewRoom returns a Room whose entry tokens are signed with a key derived
// from secret (JWT_SECRET; entryKey).
func NewRoom(rdb redis.UniversalClient, secret string) *Room {
	r := &Room{rdb: rdb, secret: entryKey(secret),
		Admissions: prometheus.NewCounter(prometheus.CounterOpts{Name: "holdfast_waiting_room_admissions_total",
			Help: "Entry tokens newly issued by the waiting room."}),
		Expirations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "holdfast_waiting_room_expirations_total",
			Help: "Users who lost their place in a waiting room, by reason: presence (silent too long) or claim (did not take its turn)."},
			[]string{"reason"})}
	for _, reason := range []string{"presence", "claim"} {
		r.Expirations.WithLabelValues(reason) // exported at 0 before the first
	}
	return r
}

// Collectors are the room's counters, for a registry.
func (r *Room) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.Admissions, r.Expirations}
}

func roomKey(ev int64, part string) string { return keyed.KeyTag(QueueKey(ev)) + ":" + part }

// roomKeys are every script's KEYS, in the order the Lua prelude names them.
func roomKeys(ev int64) []string {
	return []string{roomKey(ev, "cfg"), roomKey(ev, "queue"), roomKey(ev, "seen"), roomKey(ev, "claim"),
		roomKey(ev, "tokens"), roomKey(ev, "admits"), roomKey(ev, "expired"), roomKey(ev, "away")}
}

// enterKeys are enterScript's: the room's and, last, the queue's lease.
func enterKeys(ev int64) []string { return append(roomKeys(ev), keyed.LeaseKey(QueueKey(ev))) }

// presenceLookahead is how many users past the free slots are checked for
// presence, besides those whose turn it is (Room has the rule and why).
const presenceLookahead = 10

// roomPrelude starts every script but cfgScript: Redis's clock, the
// settings, the helpers, and the tidy-up that keeps the counts exact.
// KEYS: cfg, queue, seen, claim, tokens, admits, expired, away.
// It leaves `gone` = {users out for silence, users out for a lapsed claim}.
var roomPrelude = "local lookahead = " + strconv.Itoa(presenceLookahead) + "\n" + `
local now, nowus
do
  local t = redis.call('TIME')
  now, nowus = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local v = redis.call('HMGET', KEYS[1], 'max', 'rate', 'presence', 'claim', 'paused', 'start', 'sealed', 'soldout', 'left')
if not v[1] then return redis.error_reply('NOCFG the room has no settings') end
local max, rate, presence, claimw = tonumber(v[1]), tonumber(v[2]), tonumber(v[3]), tonumber(v[4])
local paused, start, sealed = v[5] == '1', tonumber(v[6]), v[7] == '1'
-- after a sell-out, only as many users as there are seats left hold tokens
local soldout, left = v[8] == '1', tonumber(v[9] or '0')
-- sealed only once the sale has started by Postgres' clock (Sealer), which
-- also decides who joins the pre-queue: Redis's clock is not asked
local open = start == 0 or sealed

local function out(m)
  redis.call('ZREM', KEYS[2], m)
  redis.call('ZREM', KEYS[3], m)
  redis.call('ZREM', KEYS[4], m)
  redis.call('ZREM', KEYS[8], m)
end
local function expire(m)
  out(m)
  redis.call('ZADD', KEYS[7], now, m)
end

-- slots is how many users may take a token now, and what bounds them.
local function slots()
  if not open then return 0, 'prequeue' end
  if paused then return 0, 'paused' end
  local free, why = max - redis.call('ZCARD', KEYS[5]), 'full'
  if rate > 0 then
    local r = rate - redis.call('ZCARD', KEYS[6])
    if r < free then free, why = r, 'rate' end
  end
  if soldout then
    local s = left - redis.call('ZCARD', KEYS[5])
    if s < free then free, why = s, 'sold_out' end
  end
  if free < 0 then free = 0 end
  return free, why
end

redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
-- admissions are timed in µs, so no two of the last R+1 fit in 60 s of real time
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', nowus - 60000000)
redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', now - 3600000)
local gone = {0, 0}
-- users silent for longer than the presence timeout are away: out of seen,
-- into away under their place, so away is in the line's order and each of
-- them is moved once
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. (now - presence))) do
  redis.call('ZREM', KEYS[3], m)
  local place = redis.call('ZSCORE', KEYS[2], m)
  if place then redis.call('ZADD', KEYS[8], place, m) end
end
-- passOver takes out the away users among the first free + lookahead in
-- line: the line's first away user, while it is there (taking it out may
-- bring the next one in). Away users further back keep their place, and
-- all do while nobody's turn can come (paused, pre-queue not sealed).
local function passOver()
  local free, why = slots()
  if why == 'paused' or why == 'prequeue' then return end
  while true do
    local m = redis.call('ZRANGE', KEYS[8], 0, 0)[1]
    if not m then return end
    local r = redis.call('ZRANK', KEYS[2], m)
    if r and r >= free + lookahead then return end
    if r then
      expire(m)
      gone[1] = gone[1] + 1
    else
      redis.call('ZREM', KEYS[8], m)
    end
  end
end
passOver()
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. now)
if #lapsed > 0 then
  local free = slots()
  for _, m in ipairs(lapsed) do
    local r = redis.call('ZRANK', KEYS[2], m)
    if r and r < free then
      expire(m)
      gone[2] = gone[2] + 1
    else -- no longer its turn (paused, cap lowered): a new window when it is
      redis.call('ZREM', KEYS[4], m)
    end
  end
  passOver()
end

-- status is where member m stands; touch counts the call as a sign of life.
-- A ready user's claim window starts the first time it is told.
local function status(m, touch)
  local t = redis.call('ZSCORE', KEYS[5], m)
  if t then return {'entered', tonumber(t)} end
  local r = redis.call('ZRANK', KEYS[2], m)
  if not r then
    if redis.call('ZSCORE', KEYS[7], m) then return {'expired'} end
    return {'not_queued'}
  end
  if touch then
    redis.call('ZADD', KEYS[3], now, m)
    redis.call('ZREM', KEYS[8], m) -- back from away: its place is its own
  end
  local free, why = slots()
  if not open and tonumber(redis.call('ZSCORE', KEYS[2], m)) == 0 then return {'prequeue'} end
  if r < free then
    redis.call('ZADD', KEYS[4], 'NX', now + claimw, m)
    return {'ready', r, tonumber(redis.call('ZSCORE', KEYS[4], m))}
  end
  -- not (or no longer) its turn: a window told before a pause, a lowered
  -- cap or a late pre-queue entry starts afresh when its turn comes back
  redis.call('ZREM', KEYS[4], m)
  return {'waiting', r, free, why, redis.call('ZCARD', KEYS[6]), rate}
end
`

// statusScript reports where each member stands, counting it as a sign of
// life. ARGV: token TTL ms (a poll of an entered user extends its token
// by it, seed 003 §4; 0: no refresh), members....
// Returns gone, then one status per member.
var statusScript = redis.NewScript(roomPrelude + `
local ttl = tonumber(ARGV[1])
local res = {gone}
for i = 2, #ARGV do
  local st = status(ARGV[i], true)
  if st[1] == 'entered' and ttl > 0 then
    redis.call('ZADD', KEYS[5], 'XX', 'GT', now + ttl, ARGV[i])
    st[2] = tonumber(redis.call('ZSCORE', KEYS[5], ARGV[i]))
  end
  res[#res + 1] = st
end
return res`)

// tokenScript admits member if it is its turn. ARGV: member, token TTL ms.
// Returns gone, then {'admitted', expiry}, {'entered', expiry} (a valid
// token, extended), or the member's status.
var tokenScript = redis.NewScript(roomPrelude + `
local m, ttl = ARGV[1], tonumber(ARGV[2])
if redis.call('ZSCORE', KEYS[5], m) then
  redis.call('ZADD', KEYS[5], 'GT', now + ttl, m)
  return {gone, {'entered', tonumber(redis.call('ZSCORE', KEYS[5], m))}}
end
local st = status(m, true)
if st[1] ~= 'ready' then return {gone, st} end
out(m)
redis.call('ZADD', KEYS[5], now + ttl, m)
redis.call('ZADD', KEYS[6], nowus, m .. ':' .. nowus)
return {gone, {'admitted', now + ttl}}`)

// enterScript puts member in line at place, if the caller still holds the
// queue's lease (KEYS[9]) and member neither holds a token nor is in line
// already (then it keeps its place). ARGV: fence (the holder's lease
// token), member, place.
// Returns gone, then the member's status.
var enterScript = redis.NewScript(keyed.FenceCheck(9) + roomPrelude + `
local m = ARGV[2]
if not redis.call('ZSCORE', KEYS[5], m) and not redis.call('ZSCORE', KEYS[2], m) then
  redis.call('ZADD', KEYS[2], ARGV[3], m)
  redis.call('ZREM', KEYS[7], m)
end
return {gone, status(m, true)}`)

// censusScript counts the line by status. Returns gone, then {in line,
// pre-queue entrants not yet placed, ready, valid tokens, admissions of
// the last minute}.
var censusScript = redis.NewScript(roomPrelude + `
local n = redis.call('ZCARD', KEYS[2])
local pre, ready = 0, 0
if open then
  ready = math.min(n, (slots()))
elseif start > 0 then
  pre = redis.call('ZCOUNT', KEYS[2], 0, 0)
end
return {gone, {n, pre, ready, redis.call('ZCARD', KEYS[5]), redis.call('ZCARD', KEYS[6])}}`)

// validScript reports whether member holds a valid token at Redis's clock.
// KEYS: tokens. ARGV: member.
var validScript = redis.NewScript(`
local t = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not t then return 0 end
local c = redis.call('TIME')
if tonumber(t) > tonumber(c[1]) * 1000 + math.floor(tonumber(c[2]) / 1000) then return 1 end
return 0`)

// cfgScript stores the admission settings unless newer ones are there. A
// newer version restarts every claim window: whoever is ready under the new
// settings gets a full window from the moment it is told.
// KEYS: cfg, claim. ARGV: version, max, rate, presence ms, claim ms, paused,
// start ms, sealed.
var cfgScript = redis.NewScript(`
local cur, v = tonumber(redis.call('HGET', KEYS[1], 'ver') or '0'), tonumber(ARGV[1])
if cur > v then return 0 end
if cur < v then redis.call('DEL', KEYS[2]) end
redis.call('HSET', KEYS[1], 'ver', ARGV[1], 'max', ARGV[2], 'rate', ARGV[3], 'presence', ARGV[4],
  'claim', ARGV[5], 'paused', ARGV[6], 'start', ARGV[7], 'sealed', ARGV[8])
return 1`)

// leftScript tells the room how many seats are left, and whether the
// event has sold out through seat holds (Postgres' events.sold_out_at).
// The first time it has, the room turns to offering released seats: the
// tokens of the users admitted before the sell-out lapse (they found
// nothing to hold), and from then on the users at the front of the line
// are admitted only while the seats left outnumber the valid tokens, so
// each seat a holder releases or lets expire goes to the next present user
// in line. Writes after each batch of holds, FCFS grabs or bookings keep
// the count; the periodic task sets both from Postgres, so a lost write or
// a lost settings hash heals within EVENTS_RECONCILE_INTERVAL.
// KEYS: cfg, tokens. ARGV: seats left, sold out ("1" or "0").
var leftScript = redis.NewScript(`
redis.call('HSET', KEYS[1], 'left', ARGV[1])
if ARGV[2] == '1' and redis.call('HGET', KEYS[1], 'soldout') ~= '1' then
  redis.call('HSET', KEYS[1], 'soldout', '1')
  redis.call('DEL', KEYS[2])
end
return 1`)

// SetLeft tells ev's room how many seats are left and whether the event
// has sold out through holds (leftScript).
func (r *Room) SetLeft(ctx context.Context, ev int64, left int64, soldOut bool) error {
	flag := "0"
	if soldOut {
		flag = "1"
	}
	return leftScript.Run(ctx, r.rdb, []string{roomKey(ev, "cfg"), roomKey(ev, "tokens")}, left, flag).Err()
}

// Configure stores e's admission settings in Redis, where every script
// reads them, unless a newer version of them is there. Postgres holds the
// truth; a room whose settings Redis lost has them put back by the first
// script that misses them.
func (r *Room) Configure(ctx context.Context, e Event) error {
	b := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	rate, start := 0, int64(0)
	if e.AdmitPerMinute != nil {
		rate = *e.AdmitPerMinute
	}
	if e.SalesStartAt != nil {
		start = e.SalesStartAt.UnixMilli()
	}
	err := cfgScript.Run(ctx, r.rdb, []string{roomKey(e.EventID, "cfg"), roomKey(e.EventID, "claim")}, e.version, e.MaxConcurrent, rate,
		e.PresenceTimeoutSeconds*1000, e.ClaimWindowSeconds*1000, b(e.AdmissionPaused), start, b(e.sealedAt != nil)).Err()
	if err != nil {
		return fmt.Errorf("events: configure room: %w", err)
	}
	return nil
}

// run runs a room script, configuring the room first if Redis lost its
// settings, and counts the users it took out of the line. It returns the
// script's replies after `gone`.
func (r *Room) run(ctx context.Context, s *redis.Script, e Event, keys []string, args ...any) ([]any, error) {
	res, err := s.Run(ctx, r.rdb, keys, args...).Slice()
	if err != nil && strings.HasPrefix(err.Error(), "NOCFG ") {
		if err := r.Configure(ctx, e); err != nil {
			return nil, err
		}
		res, err = s.Run(ctx, r.rdb, keys, args...).Slice()
	}
	if err != nil {
		if err := keyed.FencedErr(err); errors.Is(err, keyed.ErrLeaseLost) {
			return nil, err
		}
		return nil, fmt.Errorf("events: waiting room: %w", err)
	}
	if gone, ok := res[0].([]any); ok && len(gone) == 2 {
		if n := gone[0].(int64); n > 0 {
			r.Expirations.WithLabelValues("presence").Add(float64(n))
		}
		if n := gone[1].(int64); n > 0 {
			r.Expirations.WithLabelValues("claim").Add(float64(n))
		}
	}
	return res[1:], nil
}

// Status is a user's place in the waiting room (SPEC §6.1).
type Status struct {
	// Status is prequeue | waiting | ready | entered | expired | not_queued.
	Status     string `json:"status"`
	Rank       *int64 `json:"rank"`       // 0-based, among the users in line
	AheadCount *int64 `json:"aheadCount"` // users in line ahead: the rank
	// EtaSeconds is null while unknown: in the pre-queue, while paused, or
	// before any admission was measured without a rate to go by.
	EtaSeconds      *int64     `json:"etaSeconds"`
	ClaimBy         *time.Time `json:"claimBy,omitempty"` // ready: take the token before this
	AdmissionPaused bool       `json:"admissionPaused,omitempty"`
	SoldOut         bool       `json:"soldOut,omitempty"`      // waiting: every seat is taken for now
	SalesStartAt    *time.Time `json:"salesStartAt,omitempty"` // prequeue: when the order is drawn
	EntryToken      string     `json:"entryToken,omitempty"`   // entered, on a poll: the refreshed token
	ExpiresAt       *time.Time `json:"expiresAt,omitempty"`    // entered: the token's expiry

	reason string // waiting: what bounds admissions (full, rate, paused, prequeue)
}

// parseStatus reads a status reply of the prelude's status().
func parseStatus(e Event, v any) Status {
	a := v.([]any)
	st := Status{Status: a[0].(string)}
	num := func(i int) int64 { return a[i].(int64) }
	switch st.Status {
	case "entered", "admitted":
		t := time.UnixMilli(num(1)).UTC()
		st.ExpiresAt = &t
	case "prequeue":
		st.SalesStartAt, st.reason = e.SalesStartAt, "prequeue"
	case "ready":
		rank, zero, by := num(1), int64(0), time.UnixMilli(num(2)).UTC()
		st.Rank, st.AheadCount, st.EtaSeconds, st.ClaimBy = &rank, &rank, &zero, &by
	case "waiting":
		rank := num(1)
		st.Rank, st.AheadCount, st.reason = &rank, &rank, a[3].(string)
		st.AdmissionPaused, st.SoldOut = st.reason == "paused", st.reason == "sold_out"
		st.EtaSeconds = eta(rank, num(2), st.reason, num(4), num(5))
	}
	return st
}

// eta estimates the seconds until a waiting user at rank is admitted, with
// free slots now: the users from the first free slot to it must be admitted
// first, at the rate the admission inlet allows (admitPerMinute, 0 for
// none, as the room's settings in Redis say) when it is what binds, else at
// the rate of the last minute's admissions. Unknown (nil) when paused, in
// the pre-queue, or when nothing was admitted yet and no rate is set.
func eta(rank, free int64, reason string, admitted, admitPerMinute int64) *int64 {
	perMinute := float64(admitted)
	switch {
	case reason == "paused" || reason == "prequeue" || reason == "sold_out":
		return nil
	case reason == "rate" || admitted == 0 && admitPerMinute > 0:
		perMinute = float64(admitPerMinute)
	case admitted == 0:
		return nil
	}
	if perMinute <= 0 {
		return nil
	}
	need := rank - free + 1
	s := int64(float64(need)*60/perMinute + 0.999)
	return &s
}

// Status reports where user stands and counts the call as a sign of life;
// an entered user's token is refreshed (seed 003 §4) and returned anew.
func (r *Room) Status(ctx context.Context, e Event, user string) (Status, error) {
	res, err := r.run(ctx, statusScript, e, roomKeys(e.EventID), int64(e.TokenTTLSeconds)*1000, e.member(user))
	if err != nil {
		return Status{}, err
	}
	st := parseStatus(e, res[0])
	if st.Status == "entered" {
		if st.EntryToken, err = r.sign(e.EventID, user, *st.ExpiresAt); err != nil {
			return Status{}, err
		}
	}
	return st, nil
}

// Statuses reports where each member stands, counting it as a sign of life,
// in one round trip; tokens are not refreshed (an open stream alone must
// not keep a slot forever).
func (r *Room) Statuses(ctx context.Context, e Event, members []string) ([]Status, error) {
	args := make([]any, 0, len(members)+1)
	args = append(args, 0)
	for _, m := range members {
		args = append(args, m)
	}
	res, err := r.run(ctx, statusScript, e, roomKeys(e.EventID), args...)
	if err != nil {
		return nil, err
	}
	out := make([]Status, len(res))
	for i, v := range res {
		out[i] = parseStatus(e, v)
	}
	return out, nil
}

// ErrNotQueued means the user is neither in line nor holding a token; the
// status says whether it lost its place (expired) or never entered.
type ErrNotQueued struct{ Status string }

func (e ErrNotQueued) Error() string { return "events: " + strings.ReplaceAll(e.Status, "_", " ") }

// Admission is the answer to a token request: a token, or the status of a
// user whose turn it is not.
type Admission struct {
	Token   string
	Expires time.Time
	Status  Status // when Token is empty
}

// Issue gives user an entry token if it is its turn (a valid token is
// extended instead); otherwise the Admission carries its status. A user out
// of line is ErrNotQueued.
func (r *Room) Issue(ctx context.Context, e Event, user string) (Admission, error) {
	res, err := r.run(ctx, tokenScript, e, roomKeys(e.EventID), e.member(user), int64(e.TokenTTLSeconds)*1000)
	if err != nil {
		return Admission{}, err
	}
	st := parseStatus(e, res[0])
	switch st.Status {
	case "admitted", "entered":
		if st.Status == "admitted" {
			r.Admissions.Inc()
		}
		tok, err := r.sign(e.EventID, user, *st.ExpiresAt)
		return Admission{Token: tok, Expires: *st.ExpiresAt}, err
	case "expired", "not_queued":
		return Admission{}, ErrNotQueued{Status: st.Status}
	}
	return Admission{Status: st}, nil
}

// enter puts user in line at place (fenced by the queue's lease) and
// returns its status.
func (r *Room) enter(ctx context.Context, e Event, fence int64, user string, place int64) (Status, error) {
	res, err := r.run(ctx, enterScript, e, enterKeys(e.EventID), fence, e.member(user), place)
	if err != nil {
		return Status{}, err
	}
	return parseStatus(e, res[0]), nil
}

// Census is a waiting room's size by status, exact at one instant.
type Census struct {
	InLine, Prequeue, Ready, Waiting, ActiveTokens, AdmittedLastMinute int64
}

// Census counts e's waiting room, after taking out whoever has lapsed.
func (r *Room) Census(ctx context.Context, e Event) (Census, error) {
	res, err := r.run(ctx, censusScript, e, roomKeys(e.EventID))
	if err != nil {
		return Census{}, err
	}
	a := res[0].([]any)
	n := func(i int) int64 { return a[i].(int64) }
	c := Census{InLine: n(0), Prequeue: n(1), Ready: n(2), ActiveTokens: n(3), AdmittedLastMinute: n(4)}
	c.Waiting = c.InLine - c.Prequeue - c.Ready
	return c, nil
}

// Leave gives user's token and place up.
func (r *Room) Leave(ctx context.Context, e Event, user string) error {
	m := e.member(user)
	pipe := r.rdb.TxPipeline()
	for _, part := range []string{"tokens", "queue", "seen", "claim", "away"} {
		pipe.ZRem(ctx, roomKey(e.EventID, part), m)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// Sealed reports whether ev's pre-queue is sealed, as the room's settings
// say: they hold the seal from the moment it is made (Sealer.Seal), before
// any cached copy of the event does.
func (r *Room) Sealed(ctx context.Context, ev int64) (bool, error) {
	v, err := r.rdb.HGet(ctx, roomKey(ev, "cfg"), "sealed").Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return v == "1", err
}

// Valid reports whether user holds an unexpired token slot.
func (r *Room) Valid(ctx context.Context, e Event, user string) (bool, error) {
	n, err := validScript.Run(ctx, r.rdb, []string{roomKey(e.EventID, "tokens")}, e.member(user)).Int()
	return n == 1, err
}

// entryKey is the key of entry tokens: HMAC-SHA256 of a fixed label under
// the users' secret, so the waiting room never signs with the key of
// sign-in tokens (a key of its own, with no second secret to configure and
// rotate), and the entry key, were it to leak, reveals nothing of it.
func entryKey(secret string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("holdfast waiting-room entry tokens"))
	return m.Sum(nil)
}

type entryClaims struct {
	Event int64 `json:"event"`
	jwt.RegisteredClaims
}

func (r *Room) sign(ev int64, user string, exp time.Time) (string, error) {
	return jwt.NewWithClaims(jwt.SigningMethodHS256, entryClaims{Event: ev, RegisteredClaims: jwt.RegisteredClaims{
		Subject: user, ExpiresAt: jwt.NewNumericDate(exp), Audience: jwt.ClaimStrings{"holdfast-entry"},
	}}).SignedString(r.secret)
}

// VerifyToken checks an entry token's signature, expiry, event and user.
func (r *Room) VerifyToken(token string, ev int64, user string) bool {
	var c entryClaims
	_, err := jwt.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return r.secret, nil },
		jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired(), jwt.WithAudience("holdfast-entry"))
	return err == nil && c.Event == ev && c.Subject == user
}
