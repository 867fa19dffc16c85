package domain

import (
	"time"
)

// Stay error codes (seed 001 §6, seed 000, SPEC §4).
const (
	CodeInvalidDateRange  = "INVALID_DATE_RANGE"
	CodeDateRangeTooLong  = "DATE_RANGE_TOO_LONG"
	CodeRoomTypeInactive  = "ROOM_TYPE_INACTIVE"
	CodeHotelInactive     = "HOTEL_INACTIVE"
	CodeInvalidFilter     = "INVALID_FILTER"
	CodeNotAvailable      = "NOT_AVAILABLE"
	CodeHoldKeyConflict   = "HOLD_KEY_CONFLICT"
	CodeHoldExpired       = "HOLD_EXPIRED"
	CodeInvalidTransition = "INVALID_STATUS_TRANSITION"
)

// MaxNights is the longest date range availability and holds accept.
const MaxNights = 31

// DateLayout is the API's date format.
const DateLayout = "2006-01-02"

// DateRange is a half-open range of nights [From, To).
type DateRange struct {
	From, To time.Time
}

// ParseDateRange validates from and to (YYYY-MM-DD, from < to, at most
// MaxNights nights).
func ParseDateRange(from, to string) (DateRange, error) {
	f, ferr := time.Parse(DateLayout, from)
	t, terr := time.Parse(DateLayout, to)
	if ferr != nil || terr != nil {
		return DateRange{}, NewProblem(CodeInvalidDateRange,
			"from and to must be dates as YYYY-MM-DD")
	}
	r := DateRange{From: f, To: t}
	if !f.Before(t) {
		return DateRange{}, NewProblem(CodeInvalidDateRange, "from must be before to")
	}
	if r.Nights() > MaxNights {
		return DateRange{}, NewProblem(CodeDateRangeTooLong,
			"a range may span at most %d nights", MaxNights).WithMeta("maxNights", MaxNights)
	}
	return r, nil
}

// Nights is the number of nights in the range.
func (r DateRange) Nights() int { return int(r.To.Sub(r.From).Hours() / 24) }

// Dates lists every night of the range.
func (r DateRange) Dates() []time.Time {
	out := make([]time.Time, 0, r.Nights())
	for d := r.From; d.Before(r.To); d = d.AddDate(0, 0, 1) {
		out = append(out, d)
	}
	return out
}

// Hotel, room type and room statuses.
const (
	StatusActive       = "Active"
	StatusInactive     = "Inactive"
	StatusOutOfService = "OutOfService"
	HousekeepingClean  = "Clean"
	HousekeepingDirty  = "Dirty"
)

// Stay reservation statuses.
const (
	StayPending    = "Pending"
	StayConfirmed  = "Confirmed"
	StayCheckedIn  = "CheckedIn"
	StayCancelled  = "Cancelled"
	StayCheckedOut = "CheckedOut"
)

// StayTransition returns the status a staff action moves a reservation to,
// or a 409 problem if the action does not apply to status.
func StayTransition(status, action string) (string, error) {
	next := map[string]map[string]string{
		"check-in":  {StayConfirmed: StayCheckedIn},
		"check-out": {StayCheckedIn: StayCheckedOut},
		"cancel":    {StayPending: StayCancelled, StayConfirmed: StayCancelled},
	}[action][status]
	if next == "" {
		return "", NewProblem(CodeInvalidTransition,
			"a %s reservation cannot be moved by %s", status, action).WithMeta("status", status)
	}
	return next, nil
}
