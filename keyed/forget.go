package keyed

import (
	"context"
	"fmt"
)

// forgetBatch is how many rows one statement of Forget deletes at the most:
// a short transaction whose row locks no apply waits on for long.
const forgetBatch = 1000

// Forget deletes the per-key state of keys gone idle (doc.go,
// "Forgetting"), so Postgres holds it only for keys in use lately:
//   - key_fences rows whose token is older than ForgetAfter. The token is
//     checked again on the row being deleted, so a row an apply raised
//     meanwhile stays;
//   - key_progress rows whose mark is below every open request: they say
//     nothing about any request any more.
//
// Any number of workers may run it at once.
func (e *Engine) Forget(ctx context.Context) (fences, marks int64, err error) {
	fences, err = deleteInBatches(ctx, e, `DELETE FROM key_fences WHERE key IN (
		SELECT key FROM key_fences WHERE token < `+floorSQL(1)+` LIMIT `+fmt.Sprint(forgetBatch)+`)
		AND token < `+floorSQL(1), e.opt.ForgetAfter.Microseconds())
	if err != nil {
		return fences, 0, fmt.Errorf("keyed: forget fences: %w", err)
	}
	const below = `coalesce((SELECT min(seq) FROM requests WHERE completed_at IS NULL),
		(SELECT coalesce(max(seq), 0) + 1 FROM requests))`
	marks, err = deleteInBatches(ctx, e, `DELETE FROM key_progress WHERE key IN (
		SELECT key FROM key_progress WHERE through_seq < `+below+` LIMIT `+fmt.Sprint(forgetBatch)+`)
		AND through_seq < `+below)
	if err != nil {
		return fences, marks, fmt.Errorf("keyed: forget progress marks: %w", err)
	}
	return fences, marks, nil
}

// deleteInBatches runs a DELETE of at most forgetBatch rows until one
// deletes fewer, and returns how many rows went.
func deleteInBatches(ctx context.Context, e *Engine, q string, args ...any) (int64, error) {
	var total int64
	for {
		tag, err := e.pool.Exec(ctx, q, args...)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < forgetBatch {
			return total, nil
		}
	}
}
