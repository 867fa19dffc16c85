package events

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/keyed"
)

// QueueKey is the serialization key of an event's waiting-room entries.
func QueueKey(id int64) string { return "events:q:" + strconv.FormatInt(id, 10) }

// Room is an event's waiting room in Redis (seed 003), all keys of an event
// in one hash slot:
//
//	hf:{events:q:7}:queue   sorted set user → acceptance seq: who waits, in order
//	hf:{events:q:7}:tokens  sorted set user → expiry (ms): entry tokens
//	hf:{events:q:7}:admits  sorted set admission id → time (ms): recent admissions, for ETAs
//
// Counts are exact: a token counts while its score is after now, so an
// expired token frees its slot at its expiry, and the token script admits
// only while fewer than maxConcurrent tokens are valid (the seed's drifting
// token:count is not used).
type Room struct {
	rdb    redis.UniversalClient
	secret []byte
}

// NewRoom returns a Room; secret signs entry tokens.
func NewRoom(rdb redis.UniversalClient, secret string) *Room {
	return &Room{rdb: rdb, secret: []byte(secret)}
}

func roomKey(ev int64, part string) string { return keyed.KeyTag(QueueKey(ev)) + ":" + part }

// enterKeys are enterScript's KEYS and tokenKeys tokenScript's (and, tokens
// and queue, Leave's MULTI): all in the hash slot of the queue's lease, as
// Redis Cluster requires of one script or transaction.
func enterKeys(ev int64) []string {
	return []string{keyed.LeaseKey(QueueKey(ev)), roomKey(ev, "queue"), roomKey(ev, "tokens")}
}

func tokenKeys(ev int64) []string {
	return []string{roomKey(ev, "queue"), roomKey(ev, "tokens"), roomKey(ev, "admits")}
}

// enterScript puts a user in the queue at its acceptance seq, if the caller
// still holds the queue's lease and the user is neither queued nor entered.
// KEYS: lease, queue, tokens. ARGV: token ("0": unguarded), user, seq, now ms.
var enterScript = redis.NewScript(`
if ARGV[1] ~= '0' and redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('FENCED') end
local t = redis.call('ZSCORE', KEYS[3], ARGV[2])
if t and tonumber(t) > tonumber(ARGV[4]) then return -1 end
redis.call('ZADD', KEYS[2], 'NX', ARGV[3], ARGV[2])
return redis.call('ZRANK', KEYS[2], ARGV[2])`)

// Enter queues user at seq; rank is its 0-based place, -1 if it holds a token.
func (r *Room) enter(ctx context.Context, ev int64, fence int64, user string, seq int64, now time.Time) (int64, error) {
	rank, err := enterScript.Run(ctx, r.rdb, enterKeys(ev), fence, user, seq, now.UnixMilli()).Int64()
	if err != nil && err.Error() == "FENCED" {
		return 0, keyed.ErrLeaseLost
	}
	return rank, err
}

// tokenScript admits the user if it is its turn: its rank is below the free
// slots. A user already holding a valid token has it extended.
// KEYS: queue, tokens, admits. ARGV: user, now ms, expiry ms, maxConcurrent.
// Returns {1, expiry} when admitted, {0, rank} when not its turn, {-1} when
// not queued.
var tokenScript = redis.NewScript(`
local now, exp, max = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local held = redis.call('ZSCORE', KEYS[2], ARGV[1])
if held and tonumber(held) > now then
  redis.call('ZADD', KEYS[2], exp, ARGV[1])
  return {1, exp}
end
local rank = redis.call('ZRANK', KEYS[1], ARGV[1])
if not rank then return {-1} end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local active = redis.call('ZCARD', KEYS[2])
if rank >= max - active then return {0, rank} end
redis.call('ZADD', KEYS[2], exp, ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[3], now, ARGV[1] .. ':' .. now)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - 60000)
return {1, exp}`)

// ErrNotQueued means the user is neither queued nor holding a token.
var ErrNotQueued = errors.New("events: not queued")

// Issue gives user an entry token if it is its turn; otherwise it returns
// ok=false and the user's rank.
func (r *Room) Issue(ctx context.Context, e Event, user string, now time.Time) (token string, expires time.Time, rank int64, ok bool, err error) {
	expires = now.Add(time.Duration(e.TokenTTLSeconds) * time.Second)
	res, err := tokenScript.Run(ctx, r.rdb, tokenKeys(e.EventID),
		user, now.UnixMilli(), expires.UnixMilli(), e.MaxConcurrent).Int64Slice()
	if err != nil {
		return "", time.Time{}, 0, false, fmt.Errorf("events: issue token: %w", err)
	}
	switch res[0] {
	case -1:
		return "", time.Time{}, 0, false, ErrNotQueued
	case 0:
		return "", time.Time{}, res[1], false, nil
	}
	expires = time.UnixMilli(res[1]).UTC()
	token, err = r.sign(e.EventID, user, expires)
	return token, expires, 0, err == nil, err
}

// Status is a user's place in the waiting room.
type Status struct {
	Status     string     `json:"status"` // waiting | ready | entered | not_queued
	Rank       *int64     `json:"rank"`
	AheadCount *int64     `json:"aheadCount"`
	EtaSeconds *int64     `json:"etaSeconds"`
	EntryToken string     `json:"entryToken,omitempty"`
	ExpiresAt  *time.Time `json:"expiresAt,omitempty"`
}

// Status reports where user stands; an entered user's token is refreshed
// (seed 003 §4), and a fresh entry token returned.
func (r *Room) Status(ctx context.Context, e Event, user string, now time.Time) (Status, error) {
	ev := e.EventID
	exp := now.Add(time.Duration(e.TokenTTLSeconds) * time.Second)
	// Refresh a valid token in place (XX: only if present; GT: only later).
	pipe := r.rdb.Pipeline()
	held := pipe.ZScore(ctx, roomKey(ev, "tokens"), user)
	rank := pipe.ZRank(ctx, roomKey(ev, "queue"), user)
	active := pipe.ZCount(ctx, roomKey(ev, "tokens"), "("+strconv.FormatInt(now.UnixMilli(), 10), "+inf")
	admits := pipe.ZCount(ctx, roomKey(ev, "admits"), strconv.FormatInt(now.Add(-time.Minute).UnixMilli(), 10), "+inf")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Status{}, fmt.Errorf("events: queue status: %w", err)
	}
	if h, err := held.Result(); err == nil && int64(h) > now.UnixMilli() {
		if err := r.rdb.ZAddArgs(ctx, roomKey(ev, "tokens"), redis.ZAddArgs{XX: true, GT: true,
			Members: []redis.Z{{Score: float64(exp.UnixMilli()), Member: user}}}).Err(); err != nil {
			return Status{}, err
		}
		tok, err := r.sign(ev, user, exp.UTC())
		if err != nil {
			return Status{}, err
		}
		e := exp.UTC()
		return Status{Status: "entered", EntryToken: tok, ExpiresAt: &e}, nil
	}
	n, err := rank.Result()
	if errors.Is(err, redis.Nil) {
		return Status{Status: "not_queued"}, nil
	}
	if err != nil {
		return Status{}, err
	}
	free := int64(e.MaxConcurrent) - active.Val()
	st := Status{Status: "waiting", Rank: &n, AheadCount: &n}
	var eta int64
	if n < free {
		st.Status = "ready"
	} else if rate := float64(admits.Val()) / 60; rate > 0 {
		eta = int64(float64(n-free+1)/rate + 0.999)
	} else {
		eta = -1 // no admissions measured yet
	}
	if eta >= 0 {
		st.EtaSeconds = &eta
	}
	return st, nil
}

// Leave gives the user's token and queue place up.
func (r *Room) Leave(ctx context.Context, ev int64, user string) error {
	pipe := r.rdb.TxPipeline()
	pipe.ZRem(ctx, roomKey(ev, "tokens"), user)
	pipe.ZRem(ctx, roomKey(ev, "queue"), user)
	_, err := pipe.Exec(ctx)
	return err
}

// Valid reports whether user holds an unexpired token slot.
func (r *Room) Valid(ctx context.Context, ev int64, user string, now time.Time) (bool, error) {
	s, err := r.rdb.ZScore(ctx, roomKey(ev, "tokens"), user).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return err == nil && int64(s) > now.UnixMilli(), err
}

// ActiveTokens counts valid tokens at now.
func (r *Room) ActiveTokens(ctx context.Context, ev int64, now time.Time) (int64, error) {
	return r.rdb.ZCount(ctx, roomKey(ev, "tokens"), "("+strconv.FormatInt(now.UnixMilli(), 10), "+inf").Result()
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
