package stays

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DemoHotel is the name of the hotel SeedDemo creates.
const DemoHotel = "holdfast Demo Hotel"

// Demo identifies the demo catalog.
type Demo struct {
	HotelID     int64
	RoomTypeIDs []int64
}

// SeedDemo creates the demo hotel (two room types of five rooms) unless it
// exists; running it again changes nothing.
func SeedDemo(ctx context.Context, pool *pgxpool.Pool) (Demo, error) {
	var d Demo
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('holdfast demo stays'))`); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `SELECT id FROM hotels WHERE name = $1 ORDER BY id LIMIT 1`, DemoHotel).Scan(&d.HotelID)
		if errors.Is(err, pgx.ErrNoRows) {
			if err := tx.QueryRow(ctx, `INSERT INTO hotels (name, timezone, currency) VALUES ($1, 'Asia/Seoul', 'KRW')
				RETURNING id`, DemoHotel).Scan(&d.HotelID); err != nil {
				return err
			}
			for t, name := range []string{"Deluxe Twin", "Ocean Suite"} {
				var rt int64
				if err := tx.QueryRow(ctx, `INSERT INTO room_types (hotel_id, name) VALUES ($1, $2) RETURNING id`,
					d.HotelID, name).Scan(&rt); err != nil {
					return err
				}
				for i := 1; i <= 5; i++ {
					if _, err := tx.Exec(ctx, `INSERT INTO rooms (hotel_id, room_type_id, number) VALUES ($1, $2, $3)`,
						d.HotelID, rt, fmt.Sprintf("%d%02d", t+1, i)); err != nil {
						return err
					}
				}
			}
		} else if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT id FROM room_types WHERE hotel_id = $1 ORDER BY id`, d.HotelID)
		if err != nil {
			return err
		}
		d.RoomTypeIDs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	if err != nil {
		return Demo{}, fmt.Errorf("stays: seed demo: %w", err)
	}
	return d, nil
}
