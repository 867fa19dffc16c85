package events

import (
	"fmt"
	"strconv"
	"strings"
)

// Booking reference kinds: a seat booked through the waiting room's
// one-seat booking, and an order confirmed from a seat hold.
const (
	refSeat  = "S"
	refOrder = "O"
)

// BookingReference is what a fan quotes for a booking: its kind and its
// row's id in base 36, at least six characters (S-00002F, O-0001ZK). It
// reveals no more than the id does, which the API shows anyway.
func BookingReference(kind string, id int64) string {
	return fmt.Sprintf("%s-%06s", kind, strings.ToUpper(strconv.FormatInt(id, 36)))
}
