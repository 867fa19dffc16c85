package baseline

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/client"
)

// A run's fixture is written straight into its mode's tables, and its
// checks read them there: the server answers only the writes a rush
// measures. Where a read stands for one of holdfast's, it answers in the
// shape of holdfast's Go client (package client), so a check reads both
// designs alike.

// table is schema's table, quoted.
func table(schema, name string) string { return pgx.Identifier{schema, name}.Sanitize() }

// NewOptions makes a product with one active option of stock units per
// code and returns the options' ids, in the codes' order.
func NewOptions(ctx context.Context, db *pgxpool.Pool, schema, product string, stock int, codes ...string) ([]int64, error) {
	rows, err := db.Query(ctx, `WITH p AS (INSERT INTO `+table(schema, "products")+` (name) VALUES ($1) RETURNING id)
		INSERT INTO `+table(schema, "product_options")+` (product_id, option_code, price, stock_quantity)
		SELECT p.id, c.code, 1000, $3 FROM p, unnest($2::text[]) WITH ORDINALITY AS c(code, n) ORDER BY c.n RETURNING id`,
		product, codes, stock)
	if err != nil {
		return nil, fmt.Errorf("baseline: new options: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	slices.Sort(ids) // identities are drawn in the insert's order
	return ids, err
}

// Stocks reads each option's stock and the units its live reservations
// hold, as holdfast's stock read answers them.
func Stocks(ctx context.Context, db *pgxpool.Pool, schema string, options []int64) (map[int64]client.Stock, error) {
	rows, err := db.Query(ctx, `SELECT o.id, o.stock_quantity, coalesce(sum(r.quantity) FILTER (WHERE r.status = 'RESERVED' AND r.expires_at > now()), 0)
		FROM `+table(schema, "product_options")+` o LEFT JOIN `+table(schema, "inventory_reservations")+` r ON r.product_option_id = o.id
		WHERE o.id = ANY($1) GROUP BY o.id`, options)
	if err != nil {
		return nil, fmt.Errorf("baseline: stocks: %w", err)
	}
	out := map[int64]client.Stock{}
	var st client.Stock
	_, err = pgx.ForEachRow(rows, []any{&st.ProductOptionID, &st.StockQuantity, &st.ReservedQuantity}, func() error {
		st.AvailableStock = st.StockQuantity - st.ReservedQuantity
		out[st.ProductOptionID] = st
		return nil
	})
	return out, err
}

// LiveRows counts each user's live reservation rows on options.
func LiveRows(ctx context.Context, db *pgxpool.Pool, schema string, options []int64) (map[string]int, error) {
	rows, err := db.Query(ctx, `SELECT user_id, count(*) FROM `+table(schema, "inventory_reservations")+`
		WHERE product_option_id = ANY($1) AND status = 'RESERVED' AND expires_at > now() GROUP BY user_id`, options)
	if err != nil {
		return nil, fmt.Errorf("baseline: live reservations: %w", err)
	}
	out := map[string]int{}
	var user string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&user, &n}, func() error { out[user] = n; return nil })
	return out, err
}

// NewHotel makes a hotel of roomTypes room types of rooms rooms each and
// returns its id and its room types', in order.
func NewHotel(ctx context.Context, db *pgxpool.Pool, schema string, roomTypes, rooms int) (hotel int64, types []int64, err error) {
	err = db.QueryRow(ctx, `WITH h AS (INSERT INTO `+table(schema, "hotels")+` (name) VALUES ('hotel') RETURNING id),
		t AS (INSERT INTO `+table(schema, "room_types")+` (hotel_id, name) SELECT h.id, 'type ' || n FROM h, generate_series(1, $1) n
			RETURNING id, hotel_id),
		r AS (INSERT INTO `+table(schema, "rooms")+` (hotel_id, room_type_id, number) SELECT t.hotel_id, t.id, t.id || '-' || n
			FROM t, generate_series(1, $2) n)
		SELECT (SELECT id FROM h), ARRAY(SELECT id FROM t ORDER BY id)`, roomTypes, rooms).Scan(&hotel, &types)
	if err != nil {
		return 0, nil, fmt.Errorf("baseline: new hotel: %w", err)
	}
	return hotel, types, nil
}

// Nights reads a hotel's nights of [from, to) by room type, in date and
// room type order, as holdfast's availability read answers them: the
// rooms, those reserved (seed 000's RoomTypeStock) and those live holds
// hold.
func Nights(ctx context.Context, db *pgxpool.Pool, schema string, hotel int64, from, to string) ([]client.Availability, error) {
	rows, err := db.Query(ctx, `SELECT to_char(d, 'YYYY-MM-DD'), t.id, t.name,
			(SELECT count(*) FROM `+table(schema, "rooms")+` r WHERE r.room_type_id = t.id), coalesce(s.reserved, 0),
			(SELECT count(*) FROM `+table(schema, "holds")+` h WHERE h.room_type_id = t.id AND h.status = 'HELD'
				AND h.expires_at > statement_timestamp() AND h.stay @> d::date)
		FROM `+table(schema, "room_types")+` t CROSS JOIN generate_series($2::date, $3::date - 1, '1 day') d
		LEFT JOIN `+table(schema, "room_type_stock")+` s ON s.room_type_id = t.id AND s.stay_date = d::date
		WHERE t.hotel_id = $1 ORDER BY d, t.id`, hotel, from, to)
	if err != nil {
		return nil, fmt.Errorf("baseline: nights: %w", err)
	}
	var out []client.Availability
	var a client.Availability
	_, err = pgx.ForEachRow(rows, []any{&a.Date, &a.RoomTypeID, &a.RoomTypeName, &a.TotalRooms, &a.UnavailableRooms, &a.HeldRooms}, func() error {
		a.AvailableRooms = max(0, a.TotalRooms-a.UnavailableRooms-a.HeldRooms)
		out = append(out, a)
		return nil
	})
	return out, err
}

// NewEvent makes an event of seat map m, its holds lasting holdSeconds
// and at most perUser seats a user, with seat ids in the map's order
// (sections best first, rows, positions), and returns its id.
func NewEvent(ctx context.Context, db *pgxpool.Pool, schema, name string, m []client.Section, holdSeconds, perUser int) (ev int64, err error) {
	var sections, labels []string
	var rowNos, seats []int32
	for _, sec := range m {
		for n, r := range sec.Rows {
			sections, labels, rowNos, seats = append(sections, sec.Name), append(labels, r.Label), append(rowNos, int32(n)), append(seats, int32(r.Seats))
		}
	}
	err = db.QueryRow(ctx, `WITH m AS (SELECT * FROM unnest($4::text[], $5::text[], $6::int[], $7::int[]) WITH ORDINALITY AS m(section, label, row_no, seats, pref)),
		e AS (INSERT INTO `+table(schema, "events")+` (name, total_seats, seat_hold_seconds, max_seats_per_user)
			SELECT $1, sum(seats), $2, $3 FROM m RETURNING id),
		r AS (INSERT INTO `+table(schema, "seat_rows")+` (event_id, section, row_no, preference) SELECT e.id, section, row_no, pref FROM e, m
			RETURNING id, preference),
		s AS (INSERT INTO `+table(schema, "seats")+` (event_id, row_id, section, row_label, row_no, pos)
			SELECT e.id, r.id, m.section, m.label, m.row_no, p FROM e, m JOIN r ON r.preference = m.pref, generate_series(1, m.seats) p
			ORDER BY m.pref, p)
		SELECT id FROM e`, name, holdSeconds, perUser, sections, labels, rowNos, seats).Scan(&ev)
	if err != nil {
		return 0, fmt.Errorf("baseline: new event: %w", err)
	}
	return ev, nil
}
