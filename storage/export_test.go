package storage

import "github.com/redis/go-redis/v9"

// waiting counts the callers queued behind the batch in flight.
func (t *Turns[T]) waiting() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.queue)
}

// Waiting counts the callers queued behind the batch in flight.
func (b *Batcher) Waiting() int { return b.turns.waiting() }

// ScriptsWaiting is Waiting for the Batcher of a client from BatchScripts.
func ScriptsWaiting(rdb redis.UniversalClient) int { return rdb.(*batchedScripts).b.Waiting() }

// MigrationLock is the advisory lock class of migrators.
const MigrationLock = migrationLock
