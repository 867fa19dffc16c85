// Package recent is a map that forgets: entries live between MaxAge and
// twice that, and it holds at most twice MaxLen of them. It keeps two
// generations and drops the older one whole when the newer one is full or
// old, so no entry costs a timer or a list node, which suits a cache in
// front of every request of a rush.
package recent

import (
	"sync"
	"time"
)

// Map is safe for concurrent use. Its zero value is not usable; use New.
type Map[K comparable, V any] struct {
	maxAge time.Duration
	maxLen int
	now    func() time.Time

	mu             sync.Mutex
	newer, older   map[K]V
	newerStartedAt time.Time
}

// New returns a Map whose entries live at least maxAge unless more than
// maxLen were put since.
func New[K comparable, V any](maxAge time.Duration, maxLen int) *Map[K, V] {
	return &Map[K, V]{maxAge: maxAge, maxLen: maxLen, now: time.Now, newer: map[K]V{}, older: map[K]V{}}
}

// Put stores v under k.
func (m *Map[K, V]) Put(k K, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.age(len(m.newer) >= m.maxLen)
	m.newer[k] = v
}

// age starts a new generation when the newer one is old, or when full is
// set; the older one is dropped. Puts and Gets both age the map, so entries
// are let go while it is in use even when nothing new is put.
func (m *Map[K, V]) age(full bool) {
	if now := m.now(); now.Sub(m.newerStartedAt) > m.maxAge || full {
		m.older, m.newer, m.newerStartedAt = m.newer, make(map[K]V, len(m.newer)), now
	}
}

// Get returns the value under k, if it is still remembered.
func (m *Map[K, V]) Get(k K) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.age(false)
	if v, ok := m.newer[k]; ok {
		return v, true
	}
	v, ok := m.older[k]
	return v, ok
}

// Len is how many entries are remembered.
func (m *Map[K, V]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.newer) + len(m.older)
}
