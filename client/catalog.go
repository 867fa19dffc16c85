package client

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// Catalog calls are synchronous and need a staff or admin token (SPEC §2.1).

// NewEvent describes an event to create. Give SeatCount, Seats (labels) or
// Sections (a seat map). Nil pointers take the API's defaults.
type NewEvent struct {
	Name      string    `json:"name"`
	SeatCount int       `json:"seatCount,omitempty"`
	Seats     []string  `json:"seats,omitempty"`
	Sections  []Section `json:"sections,omitempty"`
	EventSettings
}

// Section is a section of a seat map: sections are listed best first, and
// a section's rows too.
type Section struct {
	Name      string `json:"name"`
	PriceTier string `json:"priceTier,omitempty"`
	Rows      []Row  `json:"rows"`
}

// Row is a row of a section and its seat count; its seats are side by side.
type Row struct {
	Label string `json:"label"`
	Seats int    `json:"seats"`
}

// EventSettings are an event's settings (SPEC §6, §6.1); nil takes the
// API's default on creation and keeps the current value on a change.
type EventSettings struct {
	MaxConcurrent          *int       `json:"maxConcurrent,omitempty"`
	TokenTTLSeconds        *int       `json:"tokenTtlSeconds,omitempty"`
	EntryTokenRequired     *bool      `json:"entryTokenRequired,omitempty"`
	FCFSEntryTokenRequired *bool      `json:"fcfsEntryTokenRequired,omitempty"`
	PresenceTimeoutSeconds *int       `json:"presenceTimeoutSeconds,omitempty"`
	ClaimWindowSeconds     *int       `json:"claimWindowSeconds,omitempty"`
	AdmitPerMinute         *int       `json:"admitPerMinute,omitempty"`
	AdmissionPaused        *bool      `json:"admissionPaused,omitempty"`
	QueueOpensAt           *time.Time `json:"queueOpensAt,omitempty"`
	SalesStartAt           *time.Time `json:"salesStartAt,omitempty"`
	ReturnURL              *string    `json:"returnUrl,omitempty"`
	SeatHoldSeconds        *int       `json:"seatHoldSeconds,omitempty"`
	MaxSeatsPerUser        *int       `json:"maxSeatsPerUser,omitempty"`
}

// Event is a created event.
type Event struct {
	EventID                int64  `json:"eventId"`
	Name                   string `json:"name"`
	TotalSeats             int    `json:"totalSeats"`
	MaxConcurrent          int    `json:"maxConcurrent"`
	TokenTTLSeconds        int    `json:"tokenTtlSeconds"`
	EntryTokenRequired     bool   `json:"entryTokenRequired"`
	FCFSEntryTokenRequired bool   `json:"fcfsEntryTokenRequired"`
	RoomSettings
}

// RoomSettings are an event's waiting-room settings as the API shows them,
// to its admins and in the public event alike.
type RoomSettings struct {
	PresenceTimeoutSeconds int        `json:"presenceTimeoutSeconds"`
	ClaimWindowSeconds     int        `json:"claimWindowSeconds"`
	AdmitPerMinute         *int       `json:"admitPerMinute"`
	AdmissionPaused        bool       `json:"admissionPaused"`
	QueueOpensAt           *time.Time `json:"queueOpensAt"`
	SalesStartAt           *time.Time `json:"salesStartAt"`
	ReturnURL              *string    `json:"returnUrl"`
	ShuffleCommitment      string     `json:"shuffleCommitment"`
}

// CreateEvent creates an event with its seats (admin).
func (c *Client) CreateEvent(ctx context.Context, e NewEvent) (Event, error) {
	var out Event
	err := c.Do(ctx, http.MethodPost, "/api/v1/events", e, &out)
	return out, err
}

// UpdateEvent changes an event's settings (admin); fields left nil keep
// their value.
func (c *Client) UpdateEvent(ctx context.Context, eventID int64, s EventSettings) (Event, error) {
	var out Event
	err := c.Do(ctx, http.MethodPatch, fmt.Sprintf("/api/v1/events/%d", eventID), s, &out)
	return out, err
}

// Hotel is a created hotel.
type Hotel struct {
	HotelID  int64  `json:"hotelId"`
	Name     string `json:"name"`
	Timezone string `json:"timezone"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
}

// CreateHotel creates a hotel (staff).
func (c *Client) CreateHotel(ctx context.Context, name, timezone, currency string) (Hotel, error) {
	var out Hotel
	err := c.Do(ctx, http.MethodPost, "/api/v1/hotels",
		map[string]string{"name": name, "timezone": timezone, "currency": currency}, &out)
	return out, err
}

// RoomType is a created room type.
type RoomType struct {
	RoomTypeID int64  `json:"roomTypeId"`
	HotelID    int64  `json:"hotelId"`
	Name       string `json:"name"`
	Status     string `json:"status"`
}

// CreateRoomType adds a room type to a hotel (staff).
func (c *Client) CreateRoomType(ctx context.Context, hotelID int64, name string) (RoomType, error) {
	var out RoomType
	err := c.Do(ctx, http.MethodPost, fmt.Sprintf("/api/v1/hotels/%d/room-types", hotelID), map[string]string{"name": name}, &out)
	return out, err
}

// Room is a created room.
type Room struct {
	RoomID     int64  `json:"roomId"`
	RoomTypeID int64  `json:"roomTypeId"`
	Number     string `json:"number"`
}

// CreateRoom adds a room of a room type to a hotel (staff).
func (c *Client) CreateRoom(ctx context.Context, hotelID, roomTypeID int64, number string) (Room, error) {
	var out Room
	err := c.Do(ctx, http.MethodPost, fmt.Sprintf("/api/v1/hotels/%d/rooms", hotelID),
		map[string]any{"roomTypeId": roomTypeID, "number": number}, &out)
	return out, err
}

// User is a shop user; a user's JWT sub is its UserID.
type User struct {
	UserID int64  `json:"userId"`
	Name   string `json:"name"`
}

// CreateUser creates a shop user (admin).
func (c *Client) CreateUser(ctx context.Context, name string) (User, error) {
	var out User
	err := c.Do(ctx, http.MethodPost, "/api/v1/users", map[string]string{"name": name}, &out)
	return out, err
}

// NewOption describes a product option to create.
type NewOption struct {
	OptionCode    string `json:"optionCode"`
	Price         int64  `json:"price"`
	StockQuantity int    `json:"stockQuantity"`
	IsActive      bool   `json:"isActive"`
}

// Product is a created product.
type Product struct {
	ProductID int64  `json:"productId"`
	Name      string `json:"name"`
	Options   []struct {
		ProductOptionID int64  `json:"productOptionId"`
		OptionCode      string `json:"optionCode"`
		StockQuantity   int    `json:"stockQuantity"`
	} `json:"options"`
}

// CreateProduct creates a product with its options (admin).
func (c *Client) CreateProduct(ctx context.Context, name string, options ...NewOption) (Product, error) {
	var out Product
	err := c.Do(ctx, http.MethodPost, "/api/v1/products", map[string]any{"name": name, "options": options}, &out)
	return out, err
}
