package events

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strings"
	"time"

	"github.com/holdfast/holdfast/domain"
)

// Bounds of the event settings. A waiting-room timeout is between a second
// (tests and drills) and an hour (beyond that a closed tab keeps its place
// for most of a sale); a sale may be scheduled up to a year ahead.
const (
	maxTimeoutSeconds  = 3600
	maxAdmitPerMinute  = 1_000_000
	maxMaxConcurrent   = 1_000_000
	maxTokenTTLSeconds = 86400
	maxScheduleAhead   = 366 * 24 * time.Hour
	maxReturnURL       = 2048
)

// Default event settings (SPEC §6, §6.1).
const (
	DefaultMaxConcurrent   = 800
	DefaultTokenTTLSeconds = 300
	DefaultTimeoutSeconds  = 60 // presenceTimeoutSeconds and claimWindowSeconds
	DefaultSeatHoldSeconds = 600
	DefaultMaxSeatsPerUser = 6
	maxSeatsPerUserCap     = 100
)

// optional is a JSON field that may be absent, null or a value: a PATCH
// sets null to clear a setting, and leaves an absent one as it is.
type optional[T any] struct {
	Set, Null bool
	V         T
}

func (o *optional[T]) UnmarshalJSON(b []byte) error {
	o.Set = true
	if bytes.Equal(b, []byte("null")) {
		o.Null = true
		return nil
	}
	return json.Unmarshal(b, &o.V)
}

// settingsInput is what POST and PATCH /events may say of the settings.
// Fields left nil keep their current value (or default, on creation).
type settingsInput struct {
	MaxConcurrent          *int             `json:"maxConcurrent"`
	TokenTTLSeconds        *int             `json:"tokenTtlSeconds"`
	EntryTokenRequired     *bool            `json:"entryTokenRequired"`
	FCFSEntryTokenRequired *bool            `json:"fcfsEntryTokenRequired"`
	PresenceTimeoutSeconds *int             `json:"presenceTimeoutSeconds"`
	ClaimWindowSeconds     *int             `json:"claimWindowSeconds"`
	SeatHoldSeconds        *int             `json:"seatHoldSeconds"`
	MaxSeatsPerUser        *int             `json:"maxSeatsPerUser"`
	AdmitPerMinute         optional[int]    `json:"admitPerMinute"`
	AdmissionPaused        *bool            `json:"admissionPaused"`
	QueueOpensAt           optional[string] `json:"queueOpensAt"`
	SalesStartAt           optional[string] `json:"salesStartAt"`
	ReturnURL              optional[string] `json:"returnUrl"`
	StartsAt               optional[string] `json:"startsAt"`
	Venue                  optional[string] `json:"venue"`
	ImageURL               optional[string] `json:"imageUrl"`
}

// newEventSettings is an event with its settings' defaults.
func newEventSettings() Event {
	return Event{MaxConcurrent: DefaultMaxConcurrent, TokenTTLSeconds: DefaultTokenTTLSeconds, EntryTokenRequired: true,
		SeatHoldSeconds: DefaultSeatHoldSeconds, MaxSeatsPerUser: DefaultMaxSeatsPerUser,
		RoomSettings: RoomSettings{PresenceTimeoutSeconds: DefaultTimeoutSeconds, ClaimWindowSeconds: DefaultTimeoutSeconds}}
}

// apply validates in and applies it to e at now. creating says whether e is
// being created: its queue times may then be set freely (the sale must
// still be ahead); later they may only move while the moment they name is
// still to come, and an event created without a pre-queue cannot gain one,
// as its queue may already hold people in arrival order.
func (in settingsInput) apply(e Event, now time.Time, creating bool) (Event, error) {
	ints := []struct {
		field  string
		v      *int
		lo, hi int
		dst    *int
	}{
		{"maxConcurrent", in.MaxConcurrent, 1, maxMaxConcurrent, &e.MaxConcurrent},
		{"tokenTtlSeconds", in.TokenTTLSeconds, 1, maxTokenTTLSeconds, &e.TokenTTLSeconds},
		{"presenceTimeoutSeconds", in.PresenceTimeoutSeconds, 1, maxTimeoutSeconds, &e.PresenceTimeoutSeconds},
		{"claimWindowSeconds", in.ClaimWindowSeconds, 1, maxTimeoutSeconds, &e.ClaimWindowSeconds},
		{"seatHoldSeconds", in.SeatHoldSeconds, 1, maxTokenTTLSeconds, &e.SeatHoldSeconds},
		{"maxSeatsPerUser", in.MaxSeatsPerUser, 1, maxSeatsPerUserCap, &e.MaxSeatsPerUser},
	}
	for _, f := range ints {
		if f.v == nil {
			continue
		}
		if *f.v < f.lo || *f.v > f.hi {
			return e, invalidField(f.field, "%s must be between %d and %d", f.field, f.lo, f.hi)
		}
		*f.dst = *f.v
	}
	if in.EntryTokenRequired != nil {
		e.EntryTokenRequired = *in.EntryTokenRequired
	}
	if in.FCFSEntryTokenRequired != nil {
		e.FCFSEntryTokenRequired = *in.FCFSEntryTokenRequired
	}
	if in.AdmissionPaused != nil {
		e.AdmissionPaused = *in.AdmissionPaused
	}
	switch a := in.AdmitPerMinute; {
	case a.Null:
		e.AdmitPerMinute = nil
	case a.Set && (a.V < 1 || a.V > maxAdmitPerMinute):
		return e, invalidField("admitPerMinute", "admitPerMinute must be between 1 and %d, or null for no rate limit", maxAdmitPerMinute)
	case a.Set:
		e.AdmitPerMinute = &a.V
	}
	switch u := in.ReturnURL; {
	case u.Null:
		e.ReturnURL = nil
	case u.Set:
		if err := checkReturnURL(u.V); err != nil {
			return e, err
		}
		e.ReturnURL = &u.V
	}
	e, err := in.applyDetails(e)
	if err != nil {
		return e, err
	}
	return in.applyTimes(e, now, creating)
}

// applyTimes validates and applies queueOpensAt and salesStartAt.
func (in settingsInput) applyTimes(e Event, now time.Time, creating bool) (Event, error) {
	opens, err := parseInstant("queueOpensAt", in.QueueOpensAt, now)
	if err != nil {
		return e, err
	}
	start, err := parseInstant("salesStartAt", in.SalesStartAt, now)
	if err != nil {
		return e, err
	}
	if opens != nil {
		if !creating && (e.QueueOpensAt == nil || !now.Before(*e.QueueOpensAt)) {
			return e, locked("queueOpensAt", "the queue is open already; queueOpensAt can no longer change")
		}
		e.QueueOpensAt = opens
	}
	if start != nil {
		if !creating && (e.SalesStartAt == nil || !now.Before(*e.SalesStartAt)) {
			return e, locked("salesStartAt", "salesStartAt can change only before the sale starts, on an event created with a pre-queue")
		}
		if !start.After(now) {
			return e, invalidField("salesStartAt", "salesStartAt must be in the future")
		}
		e.SalesStartAt = start
	}
	if e.QueueOpensAt != nil && e.SalesStartAt != nil && !e.QueueOpensAt.Before(*e.SalesStartAt) {
		return e, domain.NewProblem(domain.CodeInvalidDateRange,
			"queueOpensAt must be before salesStartAt").WithMeta("field", "salesStartAt")
	}
	return e, nil
}

// parseInstant reads an RFC 3339 time no more than a year ahead of now;
// absent is nil. A time once set is never cleared (null): the queue's
// order may already depend on it.
func parseInstant(field string, v optional[string], now time.Time) (*time.Time, error) {
	switch {
	case !v.Set:
		return nil, nil
	case v.Null:
		return nil, invalidField(field, "%s cannot be cleared; move it instead", field)
	}
	t, err := time.Parse(time.RFC3339, v.V)
	if err != nil {
		return nil, invalidField(field, "%s must be an RFC 3339 time, such as 2026-12-01T10:00:00Z", field)
	}
	if t.After(now.Add(maxScheduleAhead)) || t.Year() < 2000 {
		return nil, invalidField(field, "%s must be between the year 2000 and a year from now", field)
	}
	t = t.UTC().Truncate(time.Millisecond) // the waiting room's clock counts milliseconds
	return &t, nil
}

// checkReturnURL allows an absolute https URL or a path on this host.
func checkReturnURL(v string) error {
	if httpsURL(v, maxReturnURL) {
		return nil
	}
	bad := invalidField("returnUrl", "returnUrl must be an https URL or a path on this site starting with /, at most %d characters", maxReturnURL)
	if v == "" || len(v) > maxReturnURL || strings.ContainsAny(v, "\\\x00\r\n\t ") || !strings.HasPrefix(v, "/") || strings.HasPrefix(v, "//") {
		return bad
	}
	if u, err := url.Parse(v); err != nil || u.Scheme != "" || u.Host != "" {
		return bad
	}
	return nil
}

func invalidField(field, format string, args ...any) *domain.Problem {
	return domain.Invalid(format, args...).WithMeta("field", field)
}

func locked(field, msg string) *domain.Problem {
	return domain.NewProblem(domain.CodeSettingLocked, "%s", msg).WithMeta("field", field)
}
