package lincheck

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"
)

// history builds a hand-made history on a recorder, times in milliseconds
// from a fixed start.
type history struct {
	rec *Recorder
	t0  time.Time
}

func newHistory() history {
	return history{rec: NewRecorder(), t0: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
}

func (h history) at(ms int) time.Time { return h.t0.Add(time.Duration(ms) * time.Millisecond) }

// op records client's op on key, sent at from and answered at to (ms).
func (h history) op(client int, key string, from, to int, op any, out Outcome) history {
	h.rec.RecordAt(client, key, h.at(from), h.at(to), op, out)
	return h
}

// control is one hand-made history and the verdict the checker must give.
type control struct {
	name  string
	build func(h history)
	want  porcupine.CheckResult
}

func runControls(t *testing.T, m porcupine.Model, cases []control) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHistory()
			c.build(h)
			require.Equal(t, c.want, h.rec.Verdict(m))
		})
	}
}
