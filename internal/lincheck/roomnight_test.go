package lincheck

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/holdfast/holdfast/domain"
)

const night = "stays:rt:1:2026-12-08"

// The room-night model accepts a correct history, with holds lapsing at
// their expiry, and rejects each broken one: a hold counted after its
// expiry, a refusal a lapsed hold explains, an expired hold confirmed, a
// room held twice, a read that goes back in time.
func TestRoomNightControls(t *testing.T) {
	const ttl = time.Second
	h0 := newHistory()
	// granted is a hold decided at ms (its expiry ttl later).
	granted := func(id string, ms int, reused bool) Outcome {
		return OK(HoldGrant{ID: id, ExpiresAt: h0.at(ms).Add(ttl), Reused: reused})
	}
	counts := func(reserved, held, available int) Outcome { return OK(NightCounts{reserved, held, available}) }
	notAvailable, expired := Refused(domain.CodeNotAvailable, nil), Refused(domain.CodeHoldExpired, nil)
	runControls(t, RoomNight(map[string]int{night: 2, night + "x": 1}, ttl), []control{
		{"a correct history", func(h history) {
			h.op(0, night, 0, 10, PlaceHold{"u1"}, granted("h1", 5, false)).
				op(1, night, 2, 12, PlaceHold{"u2"}, granted("h2", 8, false)).
				op(2, night, 15, 20, PlaceHold{"u3"}, notAvailable).
				op(2, night, 21, 22, ReadNight{}, counts(0, 2, 0)).
				op(0, night, 30, 40, PlaceHold{"u1"}, granted("h1", 35, true)).
				op(1, night, 50, 60, ConfirmHold{"u2", "h2"}, OK(nil)).
				op(2, night, 61, 62, ReadNight{}, counts(1, 1, 0)).
				op(1, night, 70, 75, CancelHold{"u2", "h2"}, OK(nil)).
				op(1, night, 76, 77, ConfirmHold{"u2", "h2"}, OK(nil)). // the same stay again
				op(3, night, 1030, 1040, ReadNight{}, counts(1, 0, 1)). // h1 lapses at 1035 within it
				op(0, night, 1100, 1110, ConfirmHold{"u1", "h1"}, expired).
				op(2, night, 1130, 1140, PlaceHold{"u3"}, granted("h3", 1135, false)).
				op(2, night, 1150, 1160, ReadNight{}, counts(1, 1, 0))
		}, porcupine.Ok},
		{"a refusal decided just before a hold lapsed", func(h history) {
			h.op(0, night+"x", 0, 10, PlaceHold{"u1"}, granted("h1", 5, false)).
				op(1, night+"x", 1000, 1010, PlaceHold{"u2"}, notAvailable) // decided at 1000–1004
		}, porcupine.Ok},

		{"a hold counted after its expiry", func(h history) {
			h.op(0, night, 0, 10, PlaceHold{"u1"}, granted("h1", 5, false)).
				op(1, night, 1100, 1110, ReadNight{}, counts(0, 1, 1))
		}, porcupine.Illegal},
		{"a refusal only a lapsed hold explains", func(h history) {
			h.op(0, night+"x", 0, 10, PlaceHold{"u1"}, granted("h1", 5, false)).
				op(1, night+"x", 1100, 1110, PlaceHold{"u2"}, notAvailable)
		}, porcupine.Illegal},
		{"an expired hold confirmed", func(h history) {
			h.op(0, night, 0, 10, PlaceHold{"u1"}, granted("h1", 5, false)).
				op(0, night, 1100, 1110, ConfirmHold{"u1", "h1"}, OK(nil))
		}, porcupine.Illegal},
		{"a live hold called expired", func(h history) {
			h.op(0, night, 0, 10, PlaceHold{"u1"}, granted("h1", 5, false)).
				op(0, night, 20, 30, ConfirmHold{"u1", "h1"}, expired)
		}, porcupine.Illegal},
		{"a room held twice", func(h history) {
			h.op(0, night+"x", 0, 10, PlaceHold{"u1"}, granted("h1", 5, false)).
				op(1, night+"x", 0, 10, PlaceHold{"u2"}, granted("h2", 8, false))
		}, porcupine.Illegal},
		{"a hold decided outside its interval", func(h history) {
			h.op(0, night, 0, 10, PlaceHold{"u1"}, granted("h1", 50, false))
		}, porcupine.Illegal},
		{"a read that goes back in time", func(h history) {
			h.op(0, night, 0, 10, PlaceHold{"u1"}, granted("h1", 5, false)).
				op(1, night, 20, 30, ReadNight{}, counts(0, 1, 1)).
				op(1, night, 40, 50, ReadNight{}, counts(0, 0, 2))
		}, porcupine.Illegal},
		{"refused while a room was free", func(h history) {
			h.op(0, night, 0, 10, PlaceHold{"u1"}, granted("h1", 5, false)).
				op(1, night, 20, 30, PlaceHold{"u2"}, notAvailable)
		}, porcupine.Illegal},
	})
}
