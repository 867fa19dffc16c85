package domain

// The business formulas that both a read (what a page shows) and a write
// (what a worker decides) depend on. Each is written once, here, so a page
// never shows as available what a write would refuse.

// AvailableRooms is what a room type has left to sell on a night: its
// active rooms less those unavailable (occupied by a confirmed or
// checked-in stay; on the read path, Dirty rooms too when asked) and those
// held. Never below zero: holds taken before a room went out of service
// can outnumber what is left. The seed's formula (001 §3, step 3) with holds
// subtracted too; a new hold needs at least one room on every night of
// its range.
func AvailableRooms(total, unavailable, held int64) int64 {
	return max(0, total-unavailable-held)
}

// AvailableStock is what a product option can still sell: its stock less
// the quantities of RESERVED reservations not yet expired, the shop seed's
// availableStock (002, 3-2). A reserve fits when every line's quantity is
// at most this.
func AvailableStock(stock, reserved int) int {
	return stock - reserved
}
