package loadtest

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The invariant checks must be able to fail: these feed them what an
// overselling or duplicating system would have told its clients.
func TestSeatBookFindsDuplicates(t *testing.T) {
	b := newSeatBook()
	b.won("u1", 1)
	b.won("u2", 2)
	require.Empty(t, b.bad.all())
	b.won("u3", 1) // seat 1 twice
	b.won("u2", 3) // user u2 twice
	bad := b.bad.all()
	require.Len(t, bad, 2)
	require.Contains(t, bad[0], "seat 1 given to u1 and to u3")
	require.Contains(t, bad[1], "user u2 got seats 2 and 3")
}

func TestBaselineCheckFindsOversell(t *testing.T) {
	s := &baselineFCFS{seats: 2, book: newSeatBook()}
	for i, u := range []string{"a", "b", "c"} {
		s.book.won(u, int64(i+1))
	}
	v, err := s.Check(t.Context(), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"oversold: 3 seats given for 2"}, v)
}

func TestReportNumbers(t *testing.T) {
	r := NewRecorder()
	r.Start()
	for i := 1; i <= 100; i++ {
		r.Accepted("w", r.start, time.Duration(i)*time.Millisecond)
	}
	r.Lost("w", "id-1", errLost{})
	r.Stop()
	rep := r.Report("x", Options{Concurrency: 4}, 100, nil, r.LostViolations())
	require.Equal(t, 100, rep.Accepted)
	require.InDelta(t, 50, rep.Submit.P50, 1)
	require.InDelta(t, 99, rep.Submit.P99, 1)
	require.Equal(t, 100.0, rep.Submit.Max)
	require.False(t, rep.OK, "a lost request is a violation")
	var out bytes.Buffer
	rep.WriteText(&out)
	require.Contains(t, out.String(), "1 VIOLATIONS")
}

type errLost struct{}

func (errLost) Error() string { return "context canceled" }
