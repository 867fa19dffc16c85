package keyed

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/internal/testenv"
)

// slotKeys are serialization keys of every vertical, plus names whose braces
// could move a hash tag's edges.
var slotKeys = []string{"probe:a", "probe:hot", "stays:rt:7", "shop:user:42", "shop:opt:9", "events:ev:3", "events:q:3",
	"probe:{x}", "probe:a}b", "probe:{", "probe:}", "probe:{}", "probe:ü"}

// Every script of the engine (acquire, yield, peek, release, reissue,
// extend) takes some of one key's lease, fence, promise and mailbox: they must share a hash slot,
// or Redis Cluster refuses the script with CROSSSLOT. Appliers put their own
// keys behind KeyTag, so it must name the same slot too.
func TestKeyLayoutSharesOneSlot(t *testing.T) {
	for _, k := range slotKeys {
		slot := testenv.HashSlot(leaseKey(k))
		for _, other := range []string{mboxKey(k), fenceKey(k), forKey(k), LeaseKey(k), KeyTag(k) + ":anything"} {
			require.Equal(t, slot, testenv.HashSlot(other), "%s and %s", leaseKey(k), other)
		}
	}
	// Control: the check tells keys apart. Different serialization keys
	// mostly land in different slots (which is why a multi-key request takes
	// its keys one by one, never in one script), and a key without the tag
	// does not follow its lease.
	slots := map[int]bool{}
	for _, k := range slotKeys {
		slots[testenv.HashSlot(leaseKey(k))] = true
	}
	require.Greater(t, len(slots), len(slotKeys)/2)
	require.NotEqual(t, testenv.HashSlot(leaseKey("probe:a")), testenv.HashSlot("hf:probe:a:mbox"))
}
