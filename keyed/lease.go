package keyed

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// ErrLeaseLost means the lease expired or was taken over; the holder must
// stop without committing.
var ErrLeaseLost = errors.New("keyed: lease lost")

// ErrFenced means Postgres has seen a newer token for a key: a later holder
// has applied changes, so this holder's transaction was refused (K2).
var ErrFenced = errors.New("keyed: fenced out by a newer lease")

// Lease is a held lease on one key.
type Lease struct {
	Key   string
	Token int64
}

// release results.
const (
	relLost     = -1
	relKept     = 0
	relEmpty    = 1
	relNonEmpty = 2
)

// acquireWork takes key's lease for a drain if it is free; ok is false if
// it is held. A free key whose mailbox is empty is left alone (empty is
// true), as there is nothing to drain. A task whose request a drain already
// applied in a batch, maybe deferred while its key was held or backlogged,
// so costs one round trip instead of a lease's acquire, peek and release; a
// key with work left and no holder is taken and drained.
func (e *Engine) acquireWork(ctx context.Context, key string) (l Lease, ok, empty bool, err error) {
	tok, _, err := acquired(acquireScript.Run(ctx, e.rdb, []string{leaseKey(key), fenceKey(key), forKey(key), mboxKey(key)},
		e.opt.LeaseTTL.Milliseconds(), "", e.opt.ForgetAfter.Milliseconds()))
	if err != nil {
		return l, false, false, fmt.Errorf("keyed: acquire %s: %w", key, err)
	}
	return Lease{Key: key, Token: tok}, tok > 0, tok < 0, nil
}

// acquired reads an acquireScript reply: the token (0 when refused, -1 for
// an empty mailbox) and, for a lease kept for the holder of another key,
// that key.
func acquired(c *redis.Cmd) (tok int64, keptFor string, err error) {
	v, err := c.Result()
	if err != nil {
		return 0, "", err
	}
	switch v := v.(type) {
	case int64:
		return v, "", nil
	case string:
		return 0, v, nil
	}
	return 0, "", fmt.Errorf("unexpected reply %T", v)
}

// floorSQL is the lowest token Postgres accepts, by its own clock: one
// handed out less than ForgetAfter ($n, in microseconds) ago (doc.go,
// "Forgetting"). The clock is read when the statement runs
// (clock_timestamp), not when its transaction began (now()): an apply
// transaction may wait, or its process freeze, between the two.
func floorSQL(n int) string {
	return fmt.Sprintf("(extract(epoch FROM clock_timestamp()) * 1000000)::bigint - $%d", n)
}

// fence records the token of each lease whose key named names in
// key_fences inside tx, in one statement and in key order (the order every
// apply transaction takes these rows in, so two of them never wait for
// each other in a cycle). A token is refused if a newer one has already
// applied changes to its key, or it was issued more than forget ago
// (floorSQL): fence then returns a *fencedError (ErrFenced) naming that
// key. The row locks it takes also
// serialize every apply transaction on the keys. A transaction fences the
// keys of what it applies (doc.go, "Groups"), not every key its group holds,
// so a key held for a request that waits is not rewritten at every step
// (docs/benchmarks.md, "Measured speed-ups").
func fence(ctx context.Context, tx pgx.Tx, ls []Lease, named map[string]int64, forget time.Duration) error {
	var keys []string
	var toks []int64
	for _, l := range slices.SortedFunc(slices.Values(ls), func(a, b Lease) int { return strings.Compare(a.Key, b.Key) }) {
		if _, ok := named[l.Key]; ok {
			keys, toks = append(keys, l.Key), append(toks, l.Token)
		}
	}
	rows, err := tx.Query(ctx, `INSERT INTO key_fences (key, token)
		SELECT * FROM unnest($1::text[], $2::bigint[]) AS u(key, token) WHERE u.token > `+floorSQL(3)+`
		ON CONFLICT (key) DO UPDATE SET token = EXCLUDED.token WHERE key_fences.token <= EXCLUDED.token
		RETURNING key`, keys, toks, forget.Microseconds())
	if err != nil {
		return fmt.Errorf("keyed: fence: %w", err)
	}
	ok, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("keyed: fence: %w", err)
	}
	slices.Sort(ok)
	for _, k := range keys {
		if _, found := slices.BinarySearch(ok, k); !found {
			return &fencedError{key: k}
		}
	}
	return nil
}

// reissue handles ErrFenced for a holder that still holds its lease in Redis:
// that means Redis lost its fence (FLUSHALL, failover without persistence)
// or its clock is far behind Postgres'. It raises the fence above what
// Postgres has seen and accepts, and returns the lease with a fresh token.
// A holder that really lost its lease gets ErrLeaseLost.
func (e *Engine) reissue(ctx context.Context, l Lease) (Lease, error) {
	var seen int64
	if err := e.pool.QueryRow(ctx, `SELECT greatest(coalesce((SELECT token FROM key_fences WHERE key = $1), 0), `+floorSQL(2)+`)`,
		l.Key, e.opt.ForgetAfter.Microseconds()).Scan(&seen); err != nil {
		return l, fmt.Errorf("keyed: read fence %s: %w", l.Key, err)
	}
	tok, err := reissueScript.Run(ctx, e.rdb, []string{leaseKey(l.Key), fenceKey(l.Key)},
		strconv.FormatInt(l.Token, 10), seen, e.opt.ForgetAfter.Milliseconds()).Int64()
	if err != nil {
		return l, fmt.Errorf("keyed: reissue %s: %w", l.Key, err)
	}
	if tok == 0 {
		return l, ErrLeaseLost
	}
	e.log.Warn("lease token re-issued above the fence; Redis lost the key's fence or its clock is behind", "key", l.Key, "token", tok)
	return Lease{Key: l.Key, Token: tok}, nil
}
