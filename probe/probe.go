// Package probe is a write type that exists to exercise the request
// pipeline end to end: POST /api/v1/probe increments a bounded counter on
// each of its keys. Its read-modify-write deliberately loses updates unless
// requests on a key are serialized, so the keyed engine's guarantees are
// visible in its data: the counter equals the number of successes and every
// success on a key got a distinct value, in seq order. The API and
// worker enable it with HOLDFAST_PROBE=true; tests always do.
package probe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/api"
	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/requests"
	"github.com/holdfast/holdfast/storage"
	"github.com/holdfast/holdfast/worker"
)

// Task type and queue of the probe.
const (
	TypeIncr = "probe.incr"
	Queue    = "probe"
)

// CodeLimitReached rejects an increment that would pass the limit, 409.
// The probe is a test write type, so its code is its own, outside domain's
// table of statuses (limitReached sets it); the OpenAPI document's
// ErrorCode lists it all the same, as internal/apispec's tests find every
// package's Code constants.
const CodeLimitReached = "PROBE_LIMIT_REACHED"

// Payload is the body of POST /api/v1/probe.
type Payload struct {
	// Keys are the counters to increment, all or none; 1 to 4 names.
	Keys []string `json:"keys"`
	// Limit rejects the increment when a counter already reached it; 0 means none.
	Limit int64 `json:"limit,omitempty"`
	// SleepMs widens the window between read and write (0 to 1000).
	SleepMs int `json:"sleepMs,omitempty"`
	// Poison makes the applier fail, to exercise retries and failed outcomes.
	Poison bool `json:"poison,omitempty"`
}

// Result is a successful increment: each key's new value.
type Result struct {
	Values map[string]int64 `json:"values"`
}

var keyName = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

// SerialKey is the serialization key of a probe counter.
func SerialKey(name string) string { return "probe:" + name }

// Validate checks a payload.
func (p *Payload) Validate() error {
	if len(p.Keys) == 0 || len(p.Keys) > 4 {
		return api.InvalidField("keys", "keys must name 1 to 4 counters")
	}
	for _, k := range p.Keys {
		if !keyName.MatchString(k) {
			return api.InvalidField("keys", "counter names are 1 to 64 of a-z 0-9 _ -")
		}
	}
	if p.Limit < 0 {
		return api.InvalidField("limit", "limit must not be negative")
	}
	if p.SleepMs < 0 || p.SleepMs > 1000 {
		return api.InvalidField("sleepMs", "sleepMs must be between 0 and 1000")
	}
	return nil
}

// Mount adds POST /api/v1/probe to v1 (api.Server.V1); its writes are all
// it uses of the server.
func Mount(v1 fiber.Router, writes api.Writes) {
	writes.DeclareWrites(Queue, TypeIncr)
	v1.Post("/probe", func(c *fiber.Ctx) error {
		var p Payload
		if err := api.Decode(c, &p); err != nil {
			return err
		}
		if err := p.Validate(); err != nil {
			return err
		}
		keys := make([]string, len(p.Keys))
		for i, k := range p.Keys {
			keys[i] = SerialKey(k)
		}
		body, err := json.Marshal(p)
		if err != nil {
			return err
		}
		return writes.Accept(c, requests.Submission{Type: TypeIncr, Queue: Queue, Keys: keys, Payload: body})
	})
}

// Type is the worker side of the probe.
func Type() keyed.Type {
	return keyed.Type{Name: TypeIncr, Queue: Queue, Applier: keyed.Each(keyed.Plain, incr)}
}

// Types is Type as a worker module (worker.Types).
func Types(*storage.Stores) worker.Module { return worker.Module{Types: []keyed.Type{Type()}} }

// incr reads, waits, then writes the computed values: a lost update if any
// other transaction increments the same counter in between.
func incr(ctx context.Context, tx pgx.Tx, b *keyed.Batch, r *requests.Request, p *Payload) (requests.Outcome, error) {
	if p.Poison {
		return requests.Outcome{}, errors.New("probe: poisoned request")
	}
	started := time.Now()
	values := make(map[string]int64, len(p.Keys))
	for _, k := range p.Keys {
		var v int64
		err := tx.QueryRow(ctx, `SELECT value FROM probe_counters WHERE key = $1`, k).Scan(&v)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return requests.Outcome{}, fmt.Errorf("probe: read %s: %w", k, err)
		}
		if p.Limit > 0 && v >= p.Limit {
			return requests.Rejected(limitReached(k, p.Limit)), nil
		}
		values[k] = v + 1
	}
	if p.SleepMs > 0 {
		time.Sleep(time.Duration(p.SleepMs) * time.Millisecond)
	}
	ended := time.Now()
	for _, k := range p.Keys {
		if _, err := tx.Exec(ctx, `INSERT INTO probe_counters (key, value) VALUES ($1, $2)
			ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`, k, values[k]); err != nil {
			return requests.Outcome{}, fmt.Errorf("probe: write %s: %w", k, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO probe_log (request_id, key, value, worker, started_at, ended_at)
			VALUES ($1, $2, $3, $4, $5, $6)`, r.ID, k, values[k], b.Worker, started, ended); err != nil {
			return requests.Outcome{}, fmt.Errorf("probe: log %s: %w", k, err)
		}
	}
	return requests.Succeeded(Result{Values: values}), nil
}

// limitReached is the refusal of an increment on key, which reached limit.
func limitReached(key string, limit int64) *domain.Problem {
	return domain.NewProblem(CodeLimitReached, "counter %s reached its limit %d", key, limit).
		WithStatus(http.StatusConflict).WithMeta("key", key)
}
