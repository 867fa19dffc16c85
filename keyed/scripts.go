package keyed

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// FenceCheck is the Lua line with which an applier's script refuses to run
// for a holder whose lease has moved on (K2): KEYS[n] is the key's lease,
// ARGV[1] the holder's token. Its reply reaches Go as an error FencedErr
// maps to ErrLeaseLost.
func FenceCheck(n int) string {
	return "if redis.call('GET', KEYS[" + strconv.Itoa(n) + "]) ~= ARGV[1] then " +
		"return redis.error_reply('" + fencedReply + "') end\n"
}

// fencedReply starts with its own error code: Redis prefixes "ERR " to a
// script's error reply that is a single word.
const fencedReply = "FENCED the lease has moved on"

// FencedErr maps a script's fenced reply to ErrLeaseLost.
func FencedErr(err error) error {
	if err != nil && strings.HasPrefix(err.Error(), "FENCED ") {
		return ErrLeaseLost
	}
	return err
}

// Redis layout, all keys of one serialization key in one hash slot:
//
//	hf:{key}:mbox   sorted set  request id → seq
//	hf:{key}:lease  string      fencing token of the holder, with TTL
//	hf:{key}:fence  string      last token handed out, kept ForgetAfter past the last acquire
//	hf:{key}:for    string      the key whose holder a yielded lease is kept for, briefly
//	hf:incarnation  string      the id of Redis' state since it was last lost (reconcile.go, renew)
//	hf:renewing     string      the id a drain renewing it will set, with TTL (renew)
func mboxKey(k string) string { return "hf:{" + k + "}:mbox" }

// LeaseKey is the Redis key holding key's lease token. Appliers that change
// Redis state compare it with Batch.Fences[key] in the same script (K2), and
// keep their own keys in the same hash slot with KeyTag.
func LeaseKey(k string) string { return leaseKey(k) }

// KeyTag is the hash tag of key's Redis keys: "hf:{key}". Redis Cluster
// hashes only the text up to the first "}", so braces inside key still keep
// all of key's Redis keys together; keys start with their vertical's name
// ("probe:", "stays:"), so the tag is never empty.
func KeyTag(k string) string   { return "hf:{" + k + "}" }
func leaseKey(k string) string { return "hf:{" + k + "}:lease" }
func fenceKey(k string) string { return "hf:{" + k + "}:fence" }
func forKey(k string) string   { return "hf:{" + k + "}:for" }

// acquireScript takes a free lease. A lease a drain yielded for the holder
// of another key (releaseScript) goes, while that promise lasts, only to a
// caller that claims to hold that key. KEYS: lease, fence, for, and
// optionally the key's mailbox. ARGV: ttl ms, claim (a key the caller
// holds; "" for none), how long the fence outlives the acquire (ms).
// Returns the new token, 0 if the lease is held, the key it is kept for if
// that is not the claim (a caller holding that key asks again claiming
// it), or -1 if a mailbox was given and is empty: there is nothing to drain
// (entries leave only once applied), so no lease is taken.
//
// A token is Redis' clock in microseconds, or one above the key's last
// token if that is higher (doc.go, "Forgetting"), so it grows per key
// while the fence is kept, and is the time it was handed out once the
// fence is forgotten.
var acquireScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local promised = redis.call('GET', KEYS[3])
if promised and promised ~= ARGV[2] then return promised end
if KEYS[4] and redis.call('ZCARD', KEYS[4]) == 0 then return -1 end
local t = redis.call('TIME')
local tok = math.max(tonumber(t[1]) * 1000000 + tonumber(t[2]), tonumber(redis.call('GET', KEYS[2]) or '0') + 1)
redis.call('SET', KEYS[2], string.format('%d', tok), 'PX', ARGV[3])
redis.call('SET', KEYS[1], string.format('%d', tok), 'PX', ARGV[1])
if promised then redis.call('DEL', KEYS[3]) end
return tok`)

// peekScript extends a held lease and reads the head of the mailbox, each
// id followed by its seq. KEYS: lease, mbox. ARGV: token, ttl ms, n.
// Returns nil if the lease is not held with token any more.
var peekScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[3]) - 1, 'WITHSCORES')`)

// releaseScript gives a lease up, and yields it when a key to keep it for
// is given: for a while only a caller claiming that key may take it
// (acquireScript). KEYS: lease, mbox, for. ARGV: token, mode ("ifempty"
// keeps the lease while the mailbox has entries, "force" does not), the key
// to keep it for ("" for none), for how long (ms). Returns -1 if the lease
// was not held with token, 0 if kept, 1 if released with an empty mailbox,
// 2 if released with entries left.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local n = redis.call('ZCARD', KEYS[2])
if ARGV[2] == 'ifempty' and n > 0 then return 0 end
redis.call('DEL', KEYS[1])
if ARGV[3] ~= '' then redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[4]) end
if n > 0 then return 2 end
return 1`)

// reissueScript re-issues the held lease with a token above both the key's
// last token and floor, the lowest Postgres accepts (after Redis lost the
// fence, or its clock is behind). KEYS: lease, fence. ARGV: token, floor,
// how long the fence is kept (ms). Returns the new token, or 0 if the lease
// is not held with token.
var reissueScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local tok = math.max(tonumber(redis.call('GET', KEYS[2]) or '0'), tonumber(ARGV[2])) + 1
redis.call('SET', KEYS[2], string.format('%d', tok), 'PX', ARGV[3])
redis.call('SET', KEYS[1], string.format('%d', tok), 'KEEPTTL')
return tok`)

// renewedScript sets the incarnation a renewal made its marks for, unless
// Redis lost its state meanwhile, taking the renewal's own key with it.
// KEYS: renewing, incarnation. ARGV: id. Returns 1 if set, 0 if not.
var renewedScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], ARGV[1], 'NX')
return 1`)

// extendScript extends a key that still holds value: a held lease (its
// token), or the renewal under way (renew). KEYS: key. ARGV: value, ttl ms.
var extendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`)

// evalAll runs script n times in one round trip, the i-th with call(i)'s
// keys and args, and returns the replies. Scripts go by their SHA; when
// Redis does not know one (a new server, SCRIPT FLUSH, a failover to a node
// that never ran it) it loads script and runs the pipeline again, once.
func evalAll(ctx context.Context, rdb redis.UniversalClient, script *redis.Script, n int, call func(i int) ([]string, []any)) ([]*redis.Cmd, error) {
	cmds, _, err := evalThenGet(ctx, rdb, script, n, call, "")
	return cmds, err
}

// evalThenGet is evalAll that also reads key, unless it is "", right after
// the scripts, in the same round trip; read is "" for a key that is not
// there.
func evalThenGet(ctx context.Context, rdb redis.UniversalClient, script *redis.Script, n int, call func(i int) ([]string, []any), key string) (cmds []*redis.Cmd, read string, err error) {
	cmds = make([]*redis.Cmd, n)
	for try := 0; ; try++ {
		pipe := rdb.Pipeline()
		for i := range cmds {
			keys, args := call(i)
			cmds[i] = script.EvalSha(ctx, pipe, keys, args...)
		}
		var get *redis.StringCmd
		if key != "" {
			get = pipe.Get(ctx, key)
		}
		_, err := pipe.Exec(ctx)
		switch {
		case try == 0 && slices.ContainsFunc(cmds, func(c *redis.Cmd) bool { return redis.HasErrorPrefix(c.Err(), "NOSCRIPT") }):
		case err == nil || errors.Is(err, redis.Nil): // a nil reply is an answer
			if get != nil {
				read = get.Val()
			}
			return cmds, read, nil
		default:
			return cmds, read, err
		}
		if err := script.Load(ctx, rdb).Err(); err != nil {
			return cmds, read, err
		}
	}
}
