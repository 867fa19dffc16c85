package lincheck

import (
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/holdfast/holdfast/domain"
)

const ev = "events:7"

// The FCFS model accepts a correct history and rejects each broken one.
func TestFCFSControls(t *testing.T) {
	soldOut := Refused(domain.CodeSoldOut, nil)
	runControls(t, FCFS(map[string][]int64{ev: {13, 11, 12}}), []control{
		{"a correct history", func(h history) {
			h.op(0, ev, 0, 10, Grab{"u1"}, OK(int64(11))).
				op(1, ev, 5, 15, Grab{"u2"}, OK(int64(12))).
				op(2, ev, 6, 7, Grab{"u5"}, NotAccepted(domain.CodeRateLimited)).
				op(2, ev, 8, 9, Grab{"u6"}, Refused(domain.CodeContention, nil)).
				op(2, ev, 20, 25, ListSeats{}, OK([]int64{13})).
				op(0, ev, 30, 35, Grab{"u1"}, Refused(domain.CodeAlreadyReserved, int64(11))).
				op(1, ev, 31, 40, Grab{"u3"}, OK(int64(13))).
				op(2, ev, 32, 45, Grab{"u4"}, soldOut). // concurrent with u3's: placed after it
				op(0, ev, 50, 55, ListSeats{}, OK([]int64{})).
				op(2, ev, 51, 56, Grab{"u6"}, soldOut)
		}, porcupine.Ok},
		{"a grab whose outcome was never learnt took the first seat", func(h history) {
			h.op(0, ev, 0, 0, Grab{"u1"}, Unknown()).
				op(1, ev, 10, 20, Grab{"u2"}, OK(int64(12)))
		}, porcupine.Ok},

		{"a seat given twice", func(h history) {
			h.op(0, ev, 0, 10, Grab{"u1"}, OK(int64(11))).
				op(1, ev, 0, 10, Grab{"u2"}, OK(int64(11)))
		}, porcupine.Illegal},
		{"a seat skipped", func(h history) {
			h.op(0, ev, 0, 10, Grab{"u1"}, OK(int64(12)))
		}, porcupine.Illegal},
		{"sold out while a seat was free", func(h history) {
			h.op(0, ev, 0, 10, Grab{"u1"}, OK(int64(11))).
				op(1, ev, 20, 30, Grab{"u2"}, soldOut)
		}, porcupine.Illegal},
		{"a seat list that goes back in time", func(h history) {
			h.op(0, ev, 0, 10, Grab{"u1"}, OK(int64(11))).
				op(1, ev, 15, 20, ListSeats{}, OK([]int64{12, 13})).
				op(1, ev, 25, 30, ListSeats{}, OK([]int64{11, 12, 13}))
		}, porcupine.Illegal},
		{"a second seat for one user", func(h history) {
			h.op(0, ev, 0, 10, Grab{"u1"}, OK(int64(11))).
				op(0, ev, 20, 30, Grab{"u1"}, OK(int64(12)))
		}, porcupine.Illegal},
		{"ALREADY_RESERVED naming another seat", func(h history) {
			h.op(0, ev, 0, 10, Grab{"u1"}, OK(int64(11))).
				op(0, ev, 20, 30, Grab{"u1"}, Refused(domain.CodeAlreadyReserved, int64(12)))
		}, porcupine.Illegal},
		{"a grab answered 429 that took a seat", func(h history) {
			h.op(0, ev, 0, 10, Grab{"u1"}, NotAccepted(domain.CodeRateLimited)).
				op(1, ev, 20, 30, Grab{"u2"}, OK(int64(12)))
		}, porcupine.Illegal},
		{"contention after the sell-out", func(h history) {
			h.op(0, ev, 0, 10, Grab{"u1"}, OK(int64(11))).
				op(0, ev, 11, 12, Grab{"u2"}, OK(int64(12))).
				op(0, ev, 13, 14, Grab{"u3"}, OK(int64(13))).
				op(1, ev, 20, 30, Grab{"u4"}, Refused(domain.CodeContention, nil))
		}, porcupine.Illegal},
	})
}
