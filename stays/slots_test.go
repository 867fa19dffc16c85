package stays

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
)

// putScript, removeScript and the create's MGET of a user's index and
// clientHoldKey binding each run on one room type's keys and its lease: all
// must share one hash slot or Redis Cluster refuses them (CROSSSLOT).
func TestHoldKeysShareTheRoomTypeSlot(t *testing.T) {
	for _, tc := range []struct {
		hold   *Hold
		nights int
	}{
		{&Hold{HoldID: NewHoldID(7), RoomTypeID: 7, CheckIn: "2030-01-30", CheckOut: "2030-02-03", UserID: "alice", ClientHoldKey: "k1"}, 4},
		{&Hold{HoldID: NewHoldID(123456), RoomTypeID: 123456, CheckIn: "2030-12-31", CheckOut: "2031-01-01", UserID: "{bob}", ClientHoldKey: "}{"}, 1},
	} {
		h := tc.hold
		put, remove := putKeys(h, "req-1"), removeKeys(h)
		require.Len(t, put, 5+tc.nights, "lease, hold, idx, snap, done and one held set per night")
		require.Len(t, remove, 2+tc.nights)
		slot := testenv.HashSlot(put[0])
		for _, k := range append(append(put, remove...), idxKey(h.RoomTypeID, h.UserID, h.CheckIn, h.CheckOut),
			snapKey(h.RoomTypeID, h.ClientHoldKey, h.CheckIn, h.CheckOut)) {
			require.Equal(t, slot, testenv.HashSlot(k), "%s and %s", put[0], k)
		}
	}
	// Control: another room type's keys are elsewhere.
	require.NotEqual(t, testenv.HashSlot(holdKey(7, "x")), testenv.HashSlot(holdKey(8, "x")))
}
