package stays

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/keyed"
)

// Hold is a user's claim on one room of a room type for a date range.
type Hold struct {
	HoldID        string    `json:"holdId"`
	RoomTypeID    int64     `json:"roomTypeId"`
	CheckIn       string    `json:"checkIn"`
	CheckOut      string    `json:"checkOut"`
	UserID        string    `json:"userId"`
	ClientHoldKey string    `json:"clientHoldKey"`
	CreatedAt     time.Time `json:"createdAt"`
	ExpiresAt     time.Time `json:"expiresAt"`
	// Reused is set in a create's result when the user's existing hold for
	// the same range was returned with its TTL extended.
	Reused bool `json:"reused"`
}

// SerialKey is the serialization key of a room type: every hold write on it
// is applied by one holder at a time.
func SerialKey(roomTypeID int64) string { return "stays:rt:" + strconv.FormatInt(roomTypeID, 10) }

// NewHoldID makes a hold id that names its room type, so confirm and cancel
// can be routed to the room type's key without a lookup: "{roomTypeId}-{uuid}".
func NewHoldID(roomTypeID int64) string {
	return strconv.FormatInt(roomTypeID, 10) + "-" + uuid.Must(uuid.NewV7()).String()
}

// ParseHoldID returns the room type a hold id names; ok is false for
// anything that is not a hold id.
func ParseHoldID(id string) (roomTypeID int64, ok bool) {
	rt, rest, found := strings.Cut(id, "-")
	n, err := strconv.ParseInt(rt, 10, 64)
	if !found || err != nil || n <= 0 {
		return 0, false
	}
	if _, err := uuid.Parse(rest); err != nil {
		return 0, false
	}
	return n, true
}

// HoldStore keeps holds in Redis (seed 000's layout, with exact counts). All
// keys of one room type share its hash slot, with its lease.
//
//	hf:{stays:rt:7}:hold:{holdId}              hold JSON, PX ttl
//	hf:{stays:rt:7}:idx:{user}:{in}:{out}      holdId: one active hold per user and range
//	hf:{stays:rt:7}:snap:{clientKey}:{in}:{out} holdId: clientHoldKey binding
//	hf:{stays:rt:7}:held:{date}                sorted set holdId → expiry (ms): live holds of a night
//	hf:{stays:rt:7}:done:{requestId}           the result of an applied create, for re-application
//	hf:{stays:rt:7}:v                          how many batches have changed the holds (see liveHolds)
type HoldStore struct {
	rdb redis.UniversalClient
}

// NewHoldStore returns a HoldStore on rdb.
func NewHoldStore(rdb redis.UniversalClient) *HoldStore { return &HoldStore{rdb: rdb} }

func tag(rt int64) string                { return keyed.KeyTag(SerialKey(rt)) }
func holdKey(rt int64, id string) string { return tag(rt) + ":hold:" + id }
func idxKey(rt int64, user, in, out string) string {
	return tag(rt) + ":idx:" + user + ":" + in + ":" + out
}
func snapKey(rt int64, clientKey, in, out string) string {
	return tag(rt) + ":snap:" + clientKey + ":" + in + ":" + out
}
func heldKey(rt int64, date string) string    { return tag(rt) + ":held:" + date }
func doneKey(rt int64, request string) string { return tag(rt) + ":done:" + request }
func versionKey(rt int64) string              { return tag(rt) + ":v" }

// Get returns a live hold, or nil if it does not exist or has expired.
func (s *HoldStore) Get(ctx context.Context, holdID string, now time.Time) (*Hold, error) {
	rt, ok := ParseHoldID(holdID)
	if !ok {
		return nil, nil
	}
	return s.get(ctx, rt, holdID, now)
}

func (s *HoldStore) get(ctx context.Context, rt int64, holdID string, now time.Time) (*Hold, error) {
	b, err := s.rdb.Get(ctx, holdKey(rt, holdID)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var h Hold
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, err
	}
	if !h.ExpiresAt.After(now) {
		return nil, nil
	}
	return &h, nil
}

// versionTTL bounds the life of a room type's batch counter: it is read
// twice within one availability read, milliseconds apart, so a counter that
// lapses a day after the room type's last hold write has long done its job.
const versionTTL = 24 * time.Hour

// heldNights is one room type's live holds as one read saw them: the ids on
// each night of the range, and the room type's batch counter.
type heldNights struct {
	version int64
	ids     [][]string // per date
}

// liveHoldsScript reads one room type's batch counter and the live holds of
// each night, atomically (a script runs alone), so the counter goes with
// the holds it counted. KEYS: the counter, then each night's set; ARGV: the
// lowest live expiry, exclusive ("(ms").
var liveHoldsScript = redis.NewScript(`
local out = {redis.call('GET', KEYS[1]) or '0'}
for i = 2, #KEYS do out[i] = redis.call('ZRANGEBYSCORE', KEYS[i], ARGV[1], '+inf') end
return out`)

// liveHolds reads, for each room type, the ids of the live holds of each
// date at now and the room type's batch counter, as one atomic snapshot per
// room type (liveHoldsScript: its keys share the room type's hash slot, and
// a batch writes its holds and bumps the counter in one transaction), all
// in one round trip.
func (s *HoldStore) liveHolds(ctx context.Context, roomTypes []int64, dates []time.Time, now time.Time) (map[int64]heldNights, error) {
	pipe := s.rdb.Pipeline()
	min := "(" + strconv.FormatInt(now.UnixMilli(), 10)
	cmds := make(map[int64]*redis.Cmd, len(roomTypes))
	for _, rt := range roomTypes {
		keys := []string{versionKey(rt)}
		for _, d := range dates {
			keys = append(keys, heldKey(rt, d.Format(domain.DateLayout)))
		}
		cmds[rt] = liveHoldsScript.Eval(ctx, pipe, keys, min)
	}
	if len(roomTypes) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, err
		}
	}
	out := make(map[int64]heldNights, len(roomTypes))
	for rt, c := range cmds {
		vals, err := c.Slice()
		if err != nil || len(vals) != len(dates)+1 {
			return nil, fmt.Errorf("stays: live holds of room type %d: %v %w", rt, vals, err)
		}
		h := heldNights{ids: make([][]string, len(dates))}
		if h.version, err = strconv.ParseInt(fmt.Sprint(vals[0]), 10, 64); err != nil {
			return nil, fmt.Errorf("stays: batch counter of room type %d: %w", rt, err)
		}
		for i, v := range vals[1:] {
			members, _ := v.([]any)
			for _, m := range members {
				h.ids[i] = append(h.ids[i], fmt.Sprint(m))
			}
		}
		out[rt] = h
	}
	return out, nil
}

// versions reads each room type's batch counter.
func (s *HoldStore) versions(ctx context.Context, roomTypes []int64) (map[int64]int64, error) {
	pipe := s.rdb.Pipeline()
	cmds := make(map[int64]*redis.StringCmd, len(roomTypes))
	for _, rt := range roomTypes {
		cmds[rt] = pipe.Get(ctx, versionKey(rt))
	}
	if len(roomTypes) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
	}
	out := make(map[int64]int64, len(roomTypes))
	for rt, c := range cmds {
		out[rt], _ = c.Int64()
	}
	return out, nil
}

// putScript stores a hold (new, or an existing one with a later expiry) and
// the result of the request that did it, if the caller still holds the room
// type's lease. KEYS: lease, hold, idx, snap, done, held per night. ARGV:
// token, hold JSON, holdId, expiry ms, ttl ms,
// result JSON, now ms, done ttl ms. Expiries and now are the batch's clock
// (Postgres'); Redis is given only durations, never told a time of its own
// clock, so a night's count outlives its last hold whatever Redis's clock
// says.
var putScript = redis.NewScript(keyed.FenceCheck(1) + `
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[5])
redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[5])
redis.call('SET', KEYS[4], ARGV[3], 'PX', ARGV[5])
redis.call('SET', KEYS[5], ARGV[6], 'PX', ARGV[8])
local exp, now = tonumber(ARGV[4]), tonumber(ARGV[7])
for i = 6, #KEYS do
  redis.call('ZADD', KEYS[i], exp, ARGV[3])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', ARGV[7])
  if redis.call('PTTL', KEYS[i]) < exp - now then redis.call('PEXPIRE', KEYS[i], exp - now) end
end
return 1`)

// removeScript deletes a hold and takes it out of its nights' counts.
// KEYS: lease, hold, held per night. ARGV: token, holdId.
var removeScript = redis.NewScript(keyed.FenceCheck(1) + `
redis.call('DEL', KEYS[2])
for i = 3, #KEYS do redis.call('ZREM', KEYS[i], ARGV[2]) end
return 1`)

func nightKeys(rt int64, checkIn, checkOut string) []string {
	in, _ := time.Parse(domain.DateLayout, checkIn)
	out, _ := time.Parse(domain.DateLayout, checkOut)
	var keys []string
	for d := in; d.Before(out); d = d.AddDate(0, 0, 1) {
		keys = append(keys, heldKey(rt, d.Format(domain.DateLayout)))
	}
	return keys
}

// put stores h (its expiry counts from now) and result under the request.
func (s *HoldStore) put(ctx context.Context, token int64, h *Hold, requestID string, result []byte, ttl time.Duration, now time.Time) error {
	args, err := putArgs(token, h, result, ttl, now)
	if err != nil {
		return err
	}
	return keyed.FencedErr(putScript.Run(ctx, s.rdb, putKeys(h, requestID), args...).Err())
}

func putArgs(token int64, h *Hold, result []byte, ttl time.Duration, now time.Time) ([]any, error) {
	b, err := json.Marshal(h)
	return []any{token, b, h.HoldID, h.ExpiresAt.UnixMilli(), ttl.Milliseconds(),
		result, now.UnixMilli(), (ttl + time.Hour).Milliseconds()}, err
}

// remove deletes h and its counts.
func (s *HoldStore) remove(ctx context.Context, token int64, h *Hold) error {
	return keyed.FencedErr(removeScript.Run(ctx, s.rdb, removeKeys(h), token, h.HoldID).Err())
}

// holdWrite is a put of hold (the result of request) or else its removal.
type holdWrite struct {
	hold    *Hold
	put     bool
	request string
	result  []byte
	ttl     time.Duration // puts: the hold's lifetime, from now
	now     time.Time
}

// run makes writes in order, in one round trip and one transaction, each
// fenced by token: a batch's holds, as put and remove would one at a time.
// A batch of room type bump (0: none) also bumps its counter in the same
// transaction, before it commits its stays, so a reader that sees a
// batch's holds or stays sees its count too (see Availability.Hotel); the
// removal of holds whose stays are committed does not, as it changes no
// availability (a read takes a hold with a stay for the stay). The scripts
// go as EVAL, so a Redis that lost its script cache (a restart) runs them
// all the same; a fenced one is ErrLeaseLost, and so is every later one
// (the lease is lost).
func (s *HoldStore) run(ctx context.Context, token int64, writes []holdWrite, bump int64) error {
	if len(writes) == 0 && bump == 0 {
		return nil
	}
	pipe := s.rdb.TxPipeline()
	for _, w := range writes {
		if !w.put {
			removeScript.Eval(ctx, pipe, removeKeys(w.hold), token, w.hold.HoldID)
			continue
		}
		args, err := putArgs(token, w.hold, w.result, w.ttl, w.now)
		if err != nil {
			return err
		}
		putScript.Eval(ctx, pipe, putKeys(w.hold, w.request), args...)
	}
	if bump != 0 {
		v := versionKey(bump)
		pipe.Incr(ctx, v)
		pipe.PExpire(ctx, v, versionTTL)
	}
	_, err := pipe.Exec(ctx)
	return keyed.FencedErr(err)
}

// putKeys are putScript's KEYS for storing h as the result of requestID; all
// in the room type's hash slot (its lease's), as Redis Cluster requires.
func putKeys(h *Hold, requestID string) []string {
	rt := h.RoomTypeID
	return append([]string{keyed.LeaseKey(SerialKey(rt)), holdKey(rt, h.HoldID), idxKey(rt, h.UserID, h.CheckIn, h.CheckOut),
		snapKey(rt, h.ClientHoldKey, h.CheckIn, h.CheckOut), doneKey(rt, requestID)}, nightKeys(rt, h.CheckIn, h.CheckOut)...)
}

// removeKeys are removeScript's KEYS for h, in the room type's hash slot.
func removeKeys(h *Hold) []string {
	rt := h.RoomTypeID
	return append([]string{keyed.LeaseKey(SerialKey(rt)), holdKey(rt, h.HoldID)}, nightKeys(rt, h.CheckIn, h.CheckOut)...)
}
