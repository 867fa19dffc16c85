package recent

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A Sampler never makes its caller wait on a read: the first Get answers
// the zero value while the read runs; once it lands, Gets answer it until
// the next read, which a failure does not overwrite. Reads are started one
// at a time however many callers ask.
func TestSamplerAnswersWithoutWaitingOnTheRead(t *testing.T) {
	t.Parallel()
	asked := make(chan string, 10)
	answer := make(chan error)
	s := NewSampler(time.Nanosecond, func(k string) (int, error) {
		asked <- k
		if err := <-answer; err != nil {
			return 0, err
		}
		return 7, nil
	})
	require.Zero(t, s.Get("q"), "nothing read yet")
	require.Equal(t, "q", <-asked)
	require.Zero(t, s.Get("q"), "the read is still running: no second one")
	answer <- nil
	require.Eventually(t, func() bool { return s.Get("q") == 7 }, 10*time.Second, time.Millisecond)
	require.Equal(t, "q", <-asked, "due again: another read")
	answer <- errors.New("store away")
	require.Eventually(t, func() bool { // the failed read is over: a third one starts
		select {
		case <-asked:
			return true
		default:
			s.Get("q")
			return false
		}
	}, 10*time.Second, time.Millisecond)
	require.Equal(t, 7, s.Get("q"), "a failed read keeps the last value")
	answer <- nil
	require.Empty(t, asked, "one read at a time")
}
