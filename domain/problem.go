package domain

import (
	"errors"
	"fmt"
	"net/http"
)

// Codes that more than one package produces. Verticals add their own.
const (
	CodeInvalidInput         = "INVALID_INPUT"
	CodeUnauthenticated      = "UNAUTHENTICATED"
	CodeForbidden            = "FORBIDDEN"
	CodeNotFound             = "NOT_FOUND"
	CodeConflict             = "CONFLICT"
	CodeMethodNotAllowed     = "METHOD_NOT_ALLOWED"
	CodePayloadTooLarge      = "PAYLOAD_TOO_LARGE"
	CodeUnsupportedMedia     = "UNSUPPORTED_MEDIA_TYPE"
	CodeIdempotencyKeyReused = "IDEMPOTENCY_KEY_REUSED"
	CodeOverloaded           = "OVERLOADED"
	CodeRateLimited          = "RATE_LIMITED"
	CodeContention           = "CONTENTION"
	CodeInternal             = "INTERNAL"
	CodeUnavailable          = "UNAVAILABLE"
	CodeNotStored            = "NOT_STORED" // a write whose storing was in doubt, settled as never stored
)

// Problem is an error a client may see: a stable code, a human message, the
// HTTP status it maps to and optional structured detail. It is the body of
// every error envelope and of a rejected or failed request's outcome.
type Problem struct {
	Code       string         `json:"code"`
	Message    string         `json:"message"`
	HTTPStatus int            `json:"httpStatus"`
	Meta       map[string]any `json:"meta,omitempty"`
}

func (p *Problem) Error() string { return p.Code + ": " + p.Message }

// WithMeta returns a copy of p with key set in its meta.
func (p *Problem) WithMeta(key string, value any) *Problem {
	c := *p
	c.Meta = make(map[string]any, len(p.Meta)+1)
	for k, v := range p.Meta {
		c.Meta[k] = v
	}
	c.Meta[key] = value
	return &c
}

// statuses is the one place that decides each code's HTTP status: the API
// answers with it, and a rejected request's outcome carries it.
// TestEveryCodeHasAStatus keeps it complete.
var statuses = map[string]int{
	CodeInvalidInput:         http.StatusBadRequest,
	CodeUnauthenticated:      http.StatusUnauthorized,
	CodeForbidden:            http.StatusForbidden,
	CodeNotFound:             http.StatusNotFound,
	CodeConflict:             http.StatusConflict,
	CodeMethodNotAllowed:     http.StatusMethodNotAllowed,
	CodePayloadTooLarge:      http.StatusRequestEntityTooLarge,
	CodeUnsupportedMedia:     http.StatusUnsupportedMediaType,
	CodeIdempotencyKeyReused: http.StatusUnprocessableEntity,
	CodeOverloaded:           http.StatusTooManyRequests,
	CodeRateLimited:          http.StatusTooManyRequests,
	CodeContention:           http.StatusConflict,
	CodeInternal:             http.StatusInternalServerError,
	CodeUnavailable:          http.StatusServiceUnavailable,
	CodeNotStored:            http.StatusServiceUnavailable,

	CodeUserNotFound:         http.StatusNotFound,
	CodeCartEmpty:            http.StatusBadRequest,
	CodeCartFull:             http.StatusConflict,
	CodeOptionInactive:       http.StatusBadRequest,
	CodeInsufficientStock:    http.StatusConflict,
	CodeDuplicateReservation: http.StatusConflict,
	CodeReservationNotFound:  http.StatusNotFound,
	CodeReservationExpired:   http.StatusGone,

	CodeSoldOut:            http.StatusConflict,
	CodeAlreadyReserved:    http.StatusConflict,
	CodeSeatTaken:          http.StatusConflict,
	CodeEntryTokenRequired: http.StatusForbidden,
	CodeInvalidPhone:       http.StatusBadRequest,
	CodeDuplicateRequest:   http.StatusTooManyRequests,
	CodeNotYourTurn:        http.StatusConflict,
	CodeQueueNotOpen:       http.StatusConflict,
	CodeSettingLocked:      http.StatusConflict,
	CodeSeatLimit:          http.StatusConflict,
	CodeSeatsNotTogether:   http.StatusConflict,

	CodeInvalidDateRange:  http.StatusBadRequest,
	CodeDateRangeTooLong:  http.StatusBadRequest,
	CodeRoomTypeInactive:  http.StatusBadRequest,
	CodeHotelInactive:     http.StatusBadRequest,
	CodeInvalidFilter:     http.StatusBadRequest,
	CodeNotAvailable:      http.StatusConflict,
	CodeHoldKeyConflict:   http.StatusConflict,
	CodeHoldExpired:       http.StatusGone,
	CodeInvalidTransition: http.StatusConflict,
}

// StatusOf is code's HTTP status; a code missing from the table is a 500.
func StatusOf(code string) int {
	if s, ok := statuses[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// NewProblem builds a Problem with code's status; the message may use fmt
// verbs.
func NewProblem(code, format string, args ...any) *Problem {
	return &Problem{Code: code, Message: fmt.Sprintf(format, args...), HTTPStatus: StatusOf(code)}
}

// WithStatus returns a copy of p answered with status: for the HTTP layer's
// own refusals, whose status fiber chose (a 431 is INVALID_INPUT too), and
// for a code outside the table (the probe's, a test write type).
func (p *Problem) WithStatus(status int) *Problem {
	c := *p
	c.HTTPStatus = status
	return &c
}

// Invalid is an INVALID_INPUT problem.
func Invalid(format string, args ...any) *Problem {
	return NewProblem(CodeInvalidInput, format, args...)
}

// Sentinel errors that storage returns and the API maps to problems.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
)

// AsProblem returns the Problem inside err, if any.
func AsProblem(err error) (*Problem, bool) {
	var p *Problem
	if errors.As(err, &p) {
		return p, true
	}
	return nil, false
}

// Shop error codes (seed 002, SPEC §5).
const (
	CodeUserNotFound         = "USER_NOT_FOUND"
	CodeCartEmpty            = "CART_EMPTY"
	CodeCartFull             = "CART_FULL" // 409: the cart holds MaxCartItems options (package shop)
	CodeOptionInactive       = "PRODUCT_OPTION_INACTIVE"
	CodeInsufficientStock    = "INSUFFICIENT_AVAILABLE_STOCK"
	CodeDuplicateReservation = "DUPLICATE_RESERVATION"
	CodeReservationNotFound  = "RESERVATION_NOT_FOUND"
	CodeReservationExpired   = "RESERVATION_EXPIRED"
)

// Events error codes (seeds 003, 004, SPEC §6).
const (
	CodeSoldOut            = "SOLD_OUT"
	CodeAlreadyReserved    = "ALREADY_RESERVED"
	CodeSeatTaken          = "SEAT_TAKEN"
	CodeEntryTokenRequired = "ENTRY_TOKEN_REQUIRED"
	CodeInvalidPhone       = "INVALID_PHONE"
	CodeDuplicateRequest   = "DUPLICATE_REQUEST"
	CodeNotYourTurn        = "NOT_YOUR_TURN"
	CodeQueueNotOpen       = "QUEUE_NOT_OPEN"     // 409: the event's queue opens later
	CodeSettingLocked      = "SETTING_LOCKED"     // 409: the moment a setting governs has passed
	CodeSeatLimit          = "SEAT_LIMIT"         // 409: a hold would pass maxSeatsPerUser
	CodeSeatsNotTogether   = "SEATS_NOT_TOGETHER" // 409: no run of adjacent free seats is long enough
)

// TooManyRequestsCodes are the codes a 429 carries: a backlog over its cap, a
// rate limit, a repeat within DUPLICATE_WINDOW (the OpenAPI document's
// TooManyRequestsCode).
var TooManyRequestsCodes = []string{CodeOverloaded, CodeRateLimited, CodeDuplicateRequest}
