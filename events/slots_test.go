package events

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
)

// Every waiting-room script and Leave's MULTI run on one event's room keys
// (enterScript with the queue's lease): all must share one hash slot or
// Redis Cluster refuses them (CROSSSLOT).
func TestRoomKeysShareTheQueueSlot(t *testing.T) {
	for _, ev := range []int64{1, 7, 99999} {
		slot := testenv.HashSlot(enterKeys(ev)[0])
		for _, k := range enterKeys(ev) {
			require.Equal(t, slot, testenv.HashSlot(k), "%s and %s", enterKeys(ev)[0], k)
		}
	}
	// Control: another event's queue is elsewhere.
	require.NotEqual(t, testenv.HashSlot(roomKey(1, "queue")), testenv.HashSlot(roomKey(2, "queue")))
}
