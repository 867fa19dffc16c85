package recent

import (
	"sync"
	"time"
)

// Sampler answers with the last value read of each key and reads it again
// in the background once that is older than every: a caller never waits
// on the read (its source may be slow, or frozen), the zero value stands
// until the first read lands, and a read that fails keeps the last value.
// It holds one entry for each key ever asked for: for few keys (a
// process's queues).
type Sampler[K comparable, V any] struct {
	every time.Duration
	read  func(K) (V, error)

	mu      sync.Mutex
	samples map[K]*sample[V]
}

type sample[V any] struct {
	v       V
	at      time.Time
	reading bool
}

// NewSampler reads a key's value with read at most once every every.
func NewSampler[K comparable, V any](every time.Duration, read func(K) (V, error)) *Sampler[K, V] {
	return &Sampler[K, V]{every: every, read: read, samples: map[K]*sample[V]{}}
}

// Get returns k's last value, and starts a read of it if it is due.
func (s *Sampler[K, V]) Get(k K) V {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.samples[k]
	if e == nil {
		e = &sample[V]{}
		s.samples[k] = e
	}
	if !e.reading && time.Since(e.at) >= s.every {
		e.reading = true
		go s.refresh(k, e)
	}
	return e.v
}

func (s *Sampler[K, V]) refresh(k K, e *sample[V]) {
	v, err := s.read(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		e.v = v
	}
	e.at, e.reading = time.Now(), false
}
