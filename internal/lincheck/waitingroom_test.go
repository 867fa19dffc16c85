package lincheck

import (
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/holdfast/holdfast/domain"
)

const line = "events:q:7"

// The waiting-room model accepts a correct history and rejects each broken
// one: a place that moves backwards, an admission out of line, more tokens
// than slots, a count that is off.
func TestWaitingRoomControls(t *testing.T) {
	at := func(status string, rank int) Outcome { return OK(Place{status, rank}) }
	notYourTurn := func(status string, rank int) Outcome { return Refused(domain.CodeNotYourTurn, Place{status, rank}) }
	runControls(t, WaitingRoom(map[string]int{line: 1}), []control{
		{"a correct history", func(h history) {
			h.op(0, line, 0, 10, Enter{"a"}, at("ready", 0)).
				op(1, line, 5, 15, Enter{"b"}, at("waiting", 1)). // concurrent: placed after a's
				op(2, line, 6, 16, Enter{"c"}, at("waiting", 2)).
				op(1, line, 20, 25, QueueStatus{"b"}, at("waiting", 1)).
				op(1, line, 26, 28, TakeToken{"b"}, notYourTurn("waiting", 1)).
				op(0, line, 30, 35, TakeToken{"a"}, OK(nil)).
				op(2, line, 36, 40, QueueStatus{"c"}, at("waiting", 1)). // a's admission moved c up
				op(0, line, 41, 42, QueueStatus{"a"}, at("entered", -1)).
				op(0, line, 43, 44, TakeToken{"a"}, OK(nil)). // a token held is kept
				op(3, line, 45, 46, QueueStatus{"d"}, at("not_queued", -1)).
				op(3, line, 47, 48, TakeToken{"d"}, notYourTurn("not_queued", -1)).
				op(0, line, 50, 60, LeaveRoom{"a"}, OK(nil)).
				op(1, line, 55, 65, QueueStatus{"b"}, at("ready", 0)). // placed after a left
				op(0, line, 70, 80, Enter{"a"}, at("waiting", 2)).     // back of the line
				op(2, line, 71, 75, Enter{"c"}, at("waiting", 1))      // a repeat keeps its place
		}, porcupine.Ok},

		{"a place that moves backwards", func(h history) {
			h.op(0, line, 0, 10, Enter{"a"}, at("ready", 0)).
				op(1, line, 20, 30, Enter{"b"}, at("waiting", 1)).
				op(1, line, 40, 50, QueueStatus{"b"}, at("waiting", 1)).
				op(2, line, 60, 70, Enter{"c"}, at("waiting", 2)).
				op(1, line, 80, 90, QueueStatus{"b"}, at("waiting", 2))
		}, porcupine.Illegal},
		{"an admission out of line", func(h history) {
			h.op(0, line, 0, 10, Enter{"a"}, at("ready", 0)).
				op(1, line, 20, 30, Enter{"b"}, at("waiting", 1)).
				op(1, line, 40, 50, TakeToken{"b"}, OK(nil))
		}, porcupine.Illegal},
		{"more tokens than slots", func(h history) {
			h.op(0, line, 0, 10, Enter{"a"}, at("ready", 0)).
				op(1, line, 0, 10, Enter{"b"}, at("ready", 0)).
				op(0, line, 20, 30, TakeToken{"a"}, OK(nil)).
				op(1, line, 20, 30, TakeToken{"b"}, OK(nil))
		}, porcupine.Illegal},
		{"a status read with a wrong rank", func(h history) {
			h.op(0, line, 0, 10, Enter{"a"}, at("ready", 0)).
				op(1, line, 20, 30, Enter{"b"}, at("waiting", 1)).
				op(1, line, 40, 50, QueueStatus{"b"}, at("waiting", 0))
		}, porcupine.Illegal},
		{"a slot left held after leaving", func(h history) {
			h.op(0, line, 0, 10, Enter{"a"}, at("ready", 0)).
				op(1, line, 0, 10, Enter{"b"}, at("waiting", 1)).
				op(0, line, 20, 30, TakeToken{"a"}, OK(nil)).
				op(0, line, 40, 50, LeaveRoom{"a"}, OK(nil)).
				op(1, line, 60, 70, TakeToken{"b"}, notYourTurn("waiting", 0))
		}, porcupine.Illegal},
	})
}
