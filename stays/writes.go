package stays

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/keyed"
	"github.com/holdfast/holdfast/requests"
)

// Task types and queue of stays writes.
const (
	Queue           = "stays"
	TypeHoldCreate  = "hold.create"
	TypeHoldConfirm = "hold.confirm"
	TypeHoldCancel  = "hold.cancel"
)

// CreatePayload is a hold.create request.
type CreatePayload struct {
	RoomTypeID    int64  `json:"roomTypeId"`
	CheckIn       string `json:"checkIn"`
	CheckOut      string `json:"checkOut"`
	ClientHoldKey string `json:"clientHoldKey"`
}

// HoldPayload is a hold.confirm or hold.cancel request.
type HoldPayload struct {
	HoldID string `json:"holdId"`
	// Staff is set when staff or an admin acts on a user's hold.
	Staff bool `json:"staff,omitempty"`
}

// Writes applies hold writes in the worker.
type Writes struct {
	Holds *HoldStore
	// TTL is how long a hold lives (HOLD_TTL); each repeat extends it.
	TTL time.Duration
	// LockWait is how long a create may wait for its room type before it is
	// refused with CONTENTION (seed 000 T8, HOLD_LOCK_WAIT).
	LockWait time.Duration
	// Together has a batch's creates, confirms and cancels reach apply in
	// one call and be decided in one pass (HOLD_WRITES_TOGETHER); without
	// it, each run of one type is a pass of its own, with its own reads.
	// Hold storm, four pairs of 3,000 journeys (A/B pairs, docs/benchmarks.md, 2026-11-29):
	// 1,652 / 1,958 / 1,832 / 1,661 writes/s one type at a time, 2,006 /
	// 1,944 / 1,903 / 1,844 together, Postgres CPU 0.43–0.53 against
	// 0.37–0.43 ms a journey.
	Together bool
}

// Types are the stays write types for the worker: with Together one
// family, so that a batch's creates, confirms and cancels reach apply
// together and are decided in one pass, in seq order.
func (w *Writes) Types() []keyed.Type {
	a, family := keyed.ApplierFunc(w.apply), ""
	if w.Together {
		family = Queue
	}
	return []keyed.Type{
		{Name: TypeHoldCreate, Queue: Queue, Applier: a, Family: family},
		{Name: TypeHoldConfirm, Queue: Queue, Applier: a, Family: family},
		{Name: TypeHoldCancel, Queue: Queue, Applier: a, Family: family},
	}
}

// apply decides a batch of hold writes. Its requests are split by room type
// (one key is one room type, so a batch is normally one), and each room
// type's are decided together, in seq order (holdBatch).
func (w *Writes) apply(ctx context.Context, tx pgx.Tx, b *keyed.Batch) ([]requests.Outcome, error) {
	outs := make([]requests.Outcome, len(b.Requests))
	batches := map[int64]*holdBatch{}
	var order []int64
	for i, r := range b.Requests {
		op := holdOp{i: i, r: r}
		var rt int64
		var err error
		if r.Type == TypeHoldCreate {
			op.create = &CreatePayload{}
			err = json.Unmarshal(r.Payload, op.create)
			rt = op.create.RoomTypeID
		} else {
			op.hold = &HoldPayload{}
			err = json.Unmarshal(r.Payload, op.hold)
			rt, _ = ParseHoldID(op.hold.HoldID) // 0 for no hold id: such a hold does not exist
		}
		if err != nil {
			outs[i] = requests.Failed("undecodable " + r.Type + " payload")
			continue
		}
		if batches[rt] == nil {
			batches[rt] = &holdBatch{w: w, rt: rt, now: b.Now, token: b.Fences[SerialKey(rt)]}
			order = append(order, rt)
		}
		batches[rt].ops = append(batches[rt].ops, op)
	}
	for _, rt := range order {
		if err := batches[rt].apply(ctx, tx, b, outs); err != nil {
			return nil, err
		}
	}
	return outs, nil
}
