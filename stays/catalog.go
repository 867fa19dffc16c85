package stays

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/storage"
)

// Hotel is a hotel of the catalog.
type Hotel struct {
	HotelID  int64  `json:"hotelId"`
	Name     string `json:"name"`
	Timezone string `json:"timezone"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
}

// RoomType is a kind of room a hotel sells.
type RoomType struct {
	RoomTypeID int64  `json:"roomTypeId"`
	HotelID    int64  `json:"hotelId"`
	Name       string `json:"name"`
	Status     string `json:"status"`
}

// Room is one concrete room.
type Room struct {
	RoomID             int64  `json:"roomId"`
	HotelID            int64  `json:"hotelId"`
	RoomTypeID         int64  `json:"roomTypeId"`
	Number             string `json:"number"`
	Status             string `json:"status"`
	HousekeepingStatus string `json:"housekeepingStatus"`
}

// Reservation is a stay in one room.
type Reservation struct {
	ReservationID int64     `json:"reservationId"`
	HotelID       int64     `json:"hotelId"`
	RoomTypeID    int64     `json:"roomTypeId"`
	RoomID        int64     `json:"roomId"`
	UserID        string    `json:"userId"`
	HoldID        *string   `json:"holdId"`
	CheckIn       string    `json:"checkIn"`
	CheckOut      string    `json:"checkOut"`
	Status        string    `json:"status"`
	CreatedAt     time.Time `json:"createdAt"`
}

// Catalog is the Postgres side of stays.
type Catalog struct {
	pool *pgxpool.Pool
}

// NewCatalog returns a Catalog on pool.
func NewCatalog(pool *pgxpool.Pool) *Catalog { return &Catalog{pool: pool} }

// querier is a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (c *Catalog) CreateHotel(ctx context.Context, h Hotel) (Hotel, error) {
	err := c.pool.QueryRow(ctx, `INSERT INTO hotels (name, timezone, currency) VALUES ($1, $2, $3)
		RETURNING id, status`, h.Name, h.Timezone, h.Currency).Scan(&h.HotelID, &h.Status)
	return h, storage.Translate("stays: create hotel", err)
}

func (c *Catalog) Hotel(ctx context.Context, id int64) (Hotel, error) {
	return getHotel(ctx, c.pool, id)
}

func getHotel(ctx context.Context, q querier, id int64) (Hotel, error) {
	var h Hotel
	err := q.QueryRow(ctx, `SELECT id, name, timezone, currency, status FROM hotels WHERE id = $1`, id).
		Scan(&h.HotelID, &h.Name, &h.Timezone, &h.Currency, &h.Status)
	return h, storage.Translate("stays: hotel", err)
}

// SetHotelStatus changes a hotel's status.
func (c *Catalog) SetHotelStatus(ctx context.Context, id int64, status string) (Hotel, error) {
	var h Hotel
	err := c.pool.QueryRow(ctx, `UPDATE hotels SET status = $2 WHERE id = $1
		RETURNING id, name, timezone, currency, status`, id, status).
		Scan(&h.HotelID, &h.Name, &h.Timezone, &h.Currency, &h.Status)
	return h, storage.Translate("stays: set hotel status", err)
}

func (c *Catalog) CreateRoomType(ctx context.Context, rt RoomType) (RoomType, error) {
	err := c.pool.QueryRow(ctx, `INSERT INTO room_types (hotel_id, name) VALUES ($1, $2) RETURNING id, status`,
		rt.HotelID, rt.Name).Scan(&rt.RoomTypeID, &rt.Status)
	return rt, storage.Translate("stays: create room type", err)
}

func (c *Catalog) SetRoomTypeStatus(ctx context.Context, id int64, status string) (RoomType, error) {
	var rt RoomType
	err := c.pool.QueryRow(ctx, `UPDATE room_types SET status = $2 WHERE id = $1
		RETURNING id, hotel_id, name, status`, id, status).Scan(&rt.RoomTypeID, &rt.HotelID, &rt.Name, &rt.Status)
	return rt, storage.Translate("stays: set room type status", err)
}

// CreateRoom adds a room of a room type of the same hotel.
func (c *Catalog) CreateRoom(ctx context.Context, r Room) (Room, error) {
	err := c.pool.QueryRow(ctx, `INSERT INTO rooms (hotel_id, room_type_id, number)
		SELECT $1, t.id, $3 FROM room_types t WHERE t.id = $2 AND t.hotel_id = $1
		RETURNING id, status, housekeeping_status`, r.HotelID, r.RoomTypeID, r.Number).
		Scan(&r.RoomID, &r.Status, &r.HousekeepingStatus)
	return r, storage.Translate("stays: create room", err)
}

// PatchRoom changes a room's status and/or housekeeping status.
func (c *Catalog) PatchRoom(ctx context.Context, id int64, status, housekeeping *string) (Room, error) {
	var r Room
	err := c.pool.QueryRow(ctx, `UPDATE rooms SET status = coalesce($2, status),
			housekeeping_status = coalesce($3, housekeeping_status)
		WHERE id = $1 RETURNING id, hotel_id, room_type_id, number, status, housekeeping_status`, id, status, housekeeping).
		Scan(&r.RoomID, &r.HotelID, &r.RoomTypeID, &r.Number, &r.Status, &r.HousekeepingStatus)
	return r, storage.Translate("stays: patch room", err)
}

const reservationColumns = `id, hotel_id, room_type_id, room_id, user_id, hold_id,
	to_char(check_in, 'YYYY-MM-DD'), to_char(check_out, 'YYYY-MM-DD'), status, created_at`

func scanReservation(row pgx.Row) (Reservation, error) {
	var r Reservation
	err := row.Scan(&r.ReservationID, &r.HotelID, &r.RoomTypeID, &r.RoomID, &r.UserID, &r.HoldID,
		&r.CheckIn, &r.CheckOut, &r.Status, &r.CreatedAt)
	return r, err
}

// Reservations lists a hotel's reservations, newest check-in first, optionally
// of one status.
func (c *Catalog) Reservations(ctx context.Context, hotelID int64, status string, limit int) ([]Reservation, error) {
	rows, err := c.pool.Query(ctx, `SELECT `+reservationColumns+` FROM stay_reservations
		WHERE hotel_id = $1 AND ($2 = '' OR status = $2) ORDER BY check_in DESC, id DESC LIMIT $3`, hotelID, status, limit)
	if err != nil {
		return nil, storage.Translate("stays: reservations", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Reservation, error) { return scanReservation(r) })
	return out, storage.Translate("stays: reservations", err)
}

// Transition applies a staff action (check-in, check-out, cancel) to a
// reservation. Checking out makes the room Dirty (seed 001 §7).
func (c *Catalog) Transition(ctx context.Context, id int64, action string) (Reservation, error) {
	var out Reservation
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		r, err := scanReservation(tx.QueryRow(ctx, `SELECT `+reservationColumns+` FROM stay_reservations
			WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return err
		}
		next, err := domain.StayTransition(r.Status, action)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE stay_reservations SET status = $2, updated_at = now() WHERE id = $1`, id, next); err != nil {
			return err
		}
		if next == domain.StayCheckedOut {
			if _, err := tx.Exec(ctx, `UPDATE rooms SET housekeeping_status = 'Dirty' WHERE id = $1`, r.RoomID); err != nil {
				return err
			}
		}
		r.Status = next
		out = r
		return nil
	})
	var p *domain.Problem
	if errors.As(err, &p) {
		return out, p
	}
	return out, storage.Translate("stays: transition", err)
}
