package keyed

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/requests"
)

// Each is the applier of a write type whose requests are decided one at a
// time: in seq order, in the batch's one transaction, each with its
// payload decoded as P. A payload that does not decode fails that request
// alone. An error from apply is a system failure and fails the batch (see
// Applier). begin makes what the write type keeps for the length of one
// batch (a cache of what its requests read, say); Plain keeps nothing.
//
// Write types that decide a batch together (the FCFS grab and the cart
// reserve, which hand out seats and stock across the whole batch at once)
// implement Applier themselves.
func Each[S, P any](begin func(*Batch) S, apply func(ctx context.Context, tx pgx.Tx, s S, r *requests.Request, p *P) (requests.Outcome, error)) ApplierFunc {
	return func(ctx context.Context, tx pgx.Tx, b *Batch) ([]requests.Outcome, error) {
		s := begin(b)
		outs := make([]requests.Outcome, len(b.Requests))
		for i, r := range b.Requests {
			var p P
			if err := json.Unmarshal(r.Payload, &p); err != nil {
				outs[i] = requests.Failed("undecodable " + r.Type + " payload")
				continue
			}
			o, err := apply(ctx, tx, s, r, &p)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", r.Type, r.ID, err)
			}
			outs[i] = o
		}
		return outs, nil
	}
}

// Plain is Each's begin for a write type that keeps nothing across a
// batch: its apply gets the batch itself.
func Plain(b *Batch) *Batch { return b }
