package domain

import "testing"

func TestAvailableRooms(t *testing.T) {
	for _, c := range []struct {
		name                     string
		total, unavailable, held int64
		want                     int64
	}{
		{"nothing taken", 10, 0, 0, 10},
		{"stays and holds both count", 10, 3, 2, 5},
		{"the last room", 10, 8, 1, 1},
		{"sold out", 10, 8, 2, 0},
		{"holds outnumber what rooms going out of service left", 5, 4, 3, 0},
		{"no active room", 0, 0, 0, 0},
	} {
		if got := AvailableRooms(c.total, c.unavailable, c.held); got != c.want {
			t.Errorf("%s: AvailableRooms(%d, %d, %d) = %d, want %d", c.name, c.total, c.unavailable, c.held, got, c.want)
		}
	}
}

func TestAvailableStock(t *testing.T) {
	for _, c := range []struct {
		name            string
		stock, reserved int
		want            int
	}{
		{"nothing reserved", 10, 0, 10},
		{"reservations count", 10, 7, 3},
		{"all reserved", 10, 10, 0},
		// Stock lowered by an admin below what is reserved: the read shows
		// the shortfall, and no reserve fits.
		{"stock cut below the reserved", 5, 8, -3},
	} {
		if got := AvailableStock(c.stock, c.reserved); got != c.want {
			t.Errorf("%s: AvailableStock(%d, %d) = %d, want %d", c.name, c.stock, c.reserved, got, c.want)
		}
	}
}
