package recent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An entry is kept for at least maxAge, forgotten after twice that, and the
// map never holds more than twice maxLen entries.
func TestMapForgetsByAgeAndSize(t *testing.T) {
	m := New[string, int](time.Minute, 100)
	clock := time.Now()
	m.now = func() time.Time { return clock }

	m.Put("a", 1)
	v, ok := m.Get("a")
	require.True(t, ok)
	require.Equal(t, 1, v)
	_, ok = m.Get("b")
	require.False(t, ok)

	clock = clock.Add(time.Minute + time.Second)
	m.Put("b", 2) // a new generation
	_, ok = m.Get("a")
	require.True(t, ok, "kept at least maxAge")
	clock = clock.Add(time.Minute + time.Second)
	m.Put("c", 3)
	_, ok = m.Get("a")
	require.False(t, ok, "forgotten after two generations")
	_, ok = m.Get("b")
	require.True(t, ok)

	for i := range 1000 {
		m.Put(string(rune('A'+i)), i)
		require.LessOrEqual(t, m.Len(), 200)
	}
}

// Gets age the map too: with nothing new put, an entry is still forgotten
// after twice maxAge while the map is read.
func TestMapForgetsWhileOnlyRead(t *testing.T) {
	m := New[string, int](time.Minute, 100)
	clock := time.Now()
	m.now = func() time.Time { return clock }
	m.Put("a", 1)
	for range 3 {
		clock = clock.Add(time.Minute + time.Second)
		m.Get("x")
	}
	_, ok := m.Get("a")
	require.False(t, ok)
	require.Zero(t, m.Len())
}
