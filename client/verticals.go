package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// This file has typed calls for the writes and reads of each vertical. Each
// write returns the 202's Accepted; Wait gives its Outcome, whose Decode
// fills the result type named in the write's comment.

// FCFSResult is the result of a first-come-first-served seat grab.
type FCFSResult struct {
	SeatID     int64  `json:"seatId"`
	ReservedBy string `json:"reservedBy"`
	Phone      string `json:"phone,omitempty"`
}

// FCFS grabs the next free seat of an event (result FCFSResult; rejected
// codes SOLD_OUT, ALREADY_RESERVED, CONTENTION). phone may be empty.
func (c *Client) FCFS(ctx context.Context, eventID int64, phone string, opts ...WriteOption) (Accepted, error) {
	body := map[string]any{}
	if phone != "" {
		body["phone"] = phone
	}
	return c.Submit(ctx, http.MethodPost, fmt.Sprintf("/api/v1/events/%d/seats/fcfs", eventID), body, opts...)
}

// EnterQueue joins an event's waiting room.
func (c *Client) EnterQueue(ctx context.Context, eventID int64, opts ...WriteOption) (Accepted, error) {
	return c.Submit(ctx, http.MethodPost, fmt.Sprintf("/api/v1/events/%d/queue", eventID), nil, opts...)
}

// QueueStatus is the caller's place in a waiting room.
type QueueStatus struct {
	// Status is prequeue | waiting | ready | entered | expired | not_queued.
	Status          string     `json:"status"`
	Rank            *int64     `json:"rank"`
	AheadCount      *int64     `json:"aheadCount"`
	EtaSeconds      *int64     `json:"etaSeconds"`
	ClaimBy         *time.Time `json:"claimBy,omitempty"` // ready: take the token before it
	AdmissionPaused bool       `json:"admissionPaused,omitempty"`
	SalesStartAt    *time.Time `json:"salesStartAt,omitempty"`
	EntryToken      string     `json:"entryToken,omitempty"`
	ExpiresAt       *time.Time `json:"expiresAt,omitempty"`
}

// QueueStatus reads the caller's place in the waiting room.
func (c *Client) QueueStatus(ctx context.Context, eventID int64) (QueueStatus, error) {
	var s QueueStatus
	err := c.Do(ctx, http.MethodGet, fmt.Sprintf("/api/v1/events/%d/queue/status", eventID), nil, &s)
	return s, err
}

// EntryToken admits its holder to book seats until ExpiresAt.
type EntryToken struct {
	EntryToken string    `json:"entryToken"`
	ExpiresAt  time.Time `json:"expiresAt"`
}

// IssueToken claims the caller's entry token; before its turn the answer is
// an *Error with code NOT_YOUR_TURN (meta status, reason, rank).
func (c *Client) IssueToken(ctx context.Context, eventID int64) (EntryToken, error) {
	var t EntryToken
	err := c.Do(ctx, http.MethodPost, fmt.Sprintf("/api/v1/events/%d/queue/token", eventID), nil, &t)
	return t, err
}

// Seat is one seat of an event.
type Seat struct {
	SeatID int64  `json:"seatId"`
	Label  string `json:"label"`
	Status string `json:"status"` // available | reserved
}

// Seats lists an event's seats; status "available" lists only free ones.
func (c *Client) Seats(ctx context.Context, eventID int64, status string) ([]Seat, error) {
	var out struct {
		Items []Seat `json:"items"`
	}
	path := fmt.Sprintf("/api/v1/events/%d/seats", eventID)
	if status != "" {
		path += "?status=" + url.QueryEscape(status)
	}
	err := c.Do(ctx, http.MethodGet, path, nil, &out)
	return out.Items, err
}

// Booking is the result of a seat booking.
type Booking struct {
	ReservationID int64  `json:"reservationId"`
	EventID       int64  `json:"eventId"`
	SeatID        int64  `json:"seatId"`
	UserID        string `json:"userId"`
}

// BookSeat books a chosen seat with an entry token (result Booking; rejected
// codes SEAT_TAKEN, SOLD_OUT).
func (c *Client) BookSeat(ctx context.Context, eventID, seatID int64, entryToken string, opts ...WriteOption) (Accepted, error) {
	opts = append(opts, Header("X-Entry-Token", entryToken))
	return c.Submit(ctx, http.MethodPost, fmt.Sprintf("/api/v1/events/%d/seats/%d/reservation", eventID, seatID), nil, opts...)
}

// SeatHold is a hold of seats of an event, or the order it became.
type SeatHold struct {
	HoldID           int64     `json:"holdId"`
	EventID          int64     `json:"eventId"`
	UserID           string    `json:"userId"`
	Status           string    `json:"status"` // held | confirmed | released | expired
	SeatIDs          []int64   `json:"seatIds"`
	ExpiresAt        time.Time `json:"expiresAt"`
	PaymentReference *string   `json:"paymentReference"`
	BookingReference *string   `json:"bookingReference"`
}

// HoldSeats holds quantity best-available seats of an event side by side in
// one row (result SeatHold; rejected codes SOLD_OUT, SEATS_NOT_TOGETHER,
// SEAT_LIMIT). An event that requires entry tokens needs
// Header("X-Entry-Token", …) among opts.
func (c *Client) HoldSeats(ctx context.Context, eventID int64, quantity int, opts ...WriteOption) (Accepted, error) {
	return c.Submit(ctx, http.MethodPost, fmt.Sprintf("/api/v1/events/%d/holds", eventID), map[string]int{"quantity": quantity}, opts...)
}

// ConfirmSeatHold confirms a hold as an order with its payment reference
// (result SeatHold, status confirmed; rejected codes HOLD_EXPIRED,
// INVALID_TRANSITION, CONFLICT).
func (c *Client) ConfirmSeatHold(ctx context.Context, eventID, holdID int64, paymentReference string, opts ...WriteOption) (Accepted, error) {
	return c.Submit(ctx, http.MethodPost, fmt.Sprintf("/api/v1/events/%d/holds/%d/confirm", eventID, holdID),
		map[string]string{"paymentReference": paymentReference}, opts...)
}

// LeaveQueue gives the caller's token and place up.
func (c *Client) LeaveQueue(ctx context.Context, eventID int64) error {
	return c.Do(ctx, http.MethodDelete, fmt.Sprintf("/api/v1/events/%d/queue/token", eventID), nil, nil)
}

// StreamTicket is a one-use ticket for the caller's position stream; URL
// is the stream's path with the ticket, for a client that cannot send an
// Authorization header.
type StreamTicket struct {
	Ticket    string    `json:"ticket"`
	ExpiresAt time.Time `json:"expiresAt"`
	URL       string    `json:"url"`
}

// QueueTicket mints a ticket for the caller's position stream.
func (c *Client) QueueTicket(ctx context.Context, eventID int64) (StreamTicket, error) {
	var t StreamTicket
	err := c.Do(ctx, http.MethodPost, fmt.Sprintf("/api/v1/events/%d/queue/ticket", eventID), nil, &t)
	return t, err
}

// PublicEvent is an event's public summary.
type PublicEvent struct {
	EventID        int64  `json:"eventId"`
	Name           string `json:"name"`
	TotalSeats     int    `json:"totalSeats"`
	RemainingSeats int    `json:"remainingSeats"`
	RoomSettings
	ShuffleSeed *string `json:"shuffleSeed"` // once the pre-queue is sealed
}

// PrequeuePage is one page of an event's pre-queue entrants (pseudonyms, in
// entry order).
type PrequeuePage struct {
	Sealed     bool     `json:"sealed"`
	Total      int      `json:"total"`
	Entrants   []string `json:"entrants"`
	NextOffset *int     `json:"nextOffset"`
}

// Prequeue reads all of an event's pre-queue entrants and whether the list
// is complete (no token needed).
func (c *Client) Prequeue(ctx context.Context, eventID int64) (entrants []string, sealed bool, err error) {
	for offset := 0; ; {
		var p PrequeuePage
		if err := c.Do(ctx, http.MethodGet, fmt.Sprintf("/api/v1/public/events/%d/prequeue?offset=%d", eventID, offset), nil, &p); err != nil {
			return nil, false, err
		}
		entrants, sealed = append(entrants, p.Entrants...), p.Sealed
		if p.NextOffset == nil {
			return entrants, sealed, nil
		}
		offset = *p.NextOffset
	}
}

// PublicEvent reads an event's public summary (no token needed).
func (c *Client) PublicEvent(ctx context.Context, eventID int64) (PublicEvent, error) {
	var e PublicEvent
	err := c.Do(ctx, http.MethodGet, fmt.Sprintf("/api/v1/public/events/%d", eventID), nil, &e)
	return e, err
}

// Hold is a hold on a room type for a date range.
type Hold struct {
	HoldID        string    `json:"holdId"`
	RoomTypeID    int64     `json:"roomTypeId"`
	CheckIn       string    `json:"checkIn"`
	CheckOut      string    `json:"checkOut"`
	UserID        string    `json:"userId"`
	ClientHoldKey string    `json:"clientHoldKey"`
	ExpiresAt     time.Time `json:"expiresAt"`
	Reused        bool      `json:"reused"`
}

// CreateHold holds a room type from checkIn to checkOut (dates YYYY-MM-DD;
// result Hold; rejected codes NOT_AVAILABLE, HOLD_KEY_CONFLICT).
// clientHoldKey must be a UUID.
func (c *Client) CreateHold(ctx context.Context, roomTypeID int64, checkIn, checkOut, clientHoldKey string, opts ...WriteOption) (Accepted, error) {
	body := map[string]any{"roomTypeId": roomTypeID, "checkIn": checkIn, "checkOut": checkOut, "clientHoldKey": clientHoldKey}
	return c.Submit(ctx, http.MethodPost, "/api/v1/holds", body, opts...)
}

// StayReservation is a confirmed stay.
type StayReservation struct {
	ReservationID int64  `json:"reservationId"`
	RoomTypeID    int64  `json:"roomTypeId"`
	RoomID        int64  `json:"roomId"`
	UserID        string `json:"userId"`
	CheckIn       string `json:"checkIn"`
	CheckOut      string `json:"checkOut"`
	Status        string `json:"status"`
}

// ConfirmHold turns a hold into a reservation (result StayReservation;
// rejected codes HOLD_EXPIRED, NOT_AVAILABLE, FORBIDDEN).
func (c *Client) ConfirmHold(ctx context.Context, holdID string, opts ...WriteOption) (Accepted, error) {
	return c.Submit(ctx, http.MethodPost, "/api/v1/holds/"+url.PathEscape(holdID)+"/confirm", nil, opts...)
}

// CancelHold cancels a hold (idempotent).
func (c *Client) CancelHold(ctx context.Context, holdID string, opts ...WriteOption) (Accepted, error) {
	return c.Submit(ctx, http.MethodDelete, "/api/v1/holds/"+url.PathEscape(holdID), nil, opts...)
}

// Availability is one night of one room type.
type Availability struct {
	Date             string `json:"date"`
	RoomTypeID       int64  `json:"roomTypeId"`
	RoomTypeName     string `json:"roomTypeName"`
	TotalRooms       int    `json:"totalRooms"`
	UnavailableRooms int    `json:"unavailableRooms"`
	HeldRooms        int    `json:"heldRooms"`
	AvailableRooms   int    `json:"availableRooms"`
}

// Availability reads a hotel's availability per night and room type for
// [from, to) (staff).
func (c *Client) Availability(ctx context.Context, hotelID int64, from, to string) ([]Availability, error) {
	var out struct {
		Items []Availability `json:"items"`
	}
	q := url.Values{"from": {from}, "to": {to}}
	err := c.Do(ctx, http.MethodGet, fmt.Sprintf("/api/v1/hotels/%d/availability?%s", hotelID, q.Encode()), nil, &out)
	return out.Items, err
}

// SetCartItem puts quantity of a product option in the caller's cart (0
// removes it). A cart holds at most 50 different options: another one is
// refused with CART_FULL (409).
func (c *Client) SetCartItem(ctx context.Context, optionID int64, quantity int) error {
	return c.Do(ctx, http.MethodPut, fmt.Sprintf("/api/v1/cart/items/%d", optionID), map[string]int{"quantity": quantity}, nil)
}

// ReserveOrder reserves the user's whole cart (result: the reservation
// lines; rejected codes CART_EMPTY, INSUFFICIENT_AVAILABLE_STOCK,
// DUPLICATE_RESERVATION, PRODUCT_OPTION_INACTIVE, USER_NOT_FOUND; a cart
// over 50 options is refused at once with CART_FULL, 409).
func (c *Client) ReserveOrder(ctx context.Context, userID int64, opts ...WriteOption) (Accepted, error) {
	return c.Submit(ctx, http.MethodPost, "/api/v1/orders/reserve", map[string]int64{"userId": userID}, opts...)
}

// Order is a confirmed order.
type Order struct {
	OrderID int64 `json:"orderId"`
	UserID  int64 `json:"userId"`
	Lines   []struct {
		ProductOptionID int64 `json:"productOptionId"`
		Quantity        int   `json:"quantity"`
		UnitPrice       int64 `json:"unitPrice"`
	} `json:"lines"`
	Total int64 `json:"total"`
}

// ConfirmOrder pays for the user's reservation (result Order; rejected
// codes RESERVATION_NOT_FOUND, RESERVATION_EXPIRED).
func (c *Client) ConfirmOrder(ctx context.Context, userID int64, opts ...WriteOption) (Accepted, error) {
	return c.Submit(ctx, http.MethodPost, "/api/v1/orders", map[string]int64{"userId": userID}, opts...)
}

// ReleaseOrder releases the caller's reservation (idempotent).
func (c *Client) ReleaseOrder(ctx context.Context, opts ...WriteOption) (Accepted, error) {
	return c.Submit(ctx, http.MethodDelete, "/api/v1/orders/reserve", nil, opts...)
}

// Stock is a product option's stock.
type Stock struct {
	ProductOptionID  int64 `json:"productOptionId"`
	StockQuantity    int   `json:"stockQuantity"`
	ReservedQuantity int   `json:"reservedQuantity"`
	AvailableStock   int   `json:"availableStock"`
}

// Stock reads a product option's stock.
func (c *Client) Stock(ctx context.Context, optionID int64) (Stock, error) {
	var s Stock
	err := c.Do(ctx, http.MethodGet, fmt.Sprintf("/api/v1/product-options/%d/stock", optionID), nil, &s)
	return s, err
}
