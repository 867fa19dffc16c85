package stays

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/testenv"
)

// The benchmark's hotel: 10 room types of 50 rooms, and 100 stays per room
// laid end to end with gaps over one year, so no room is booked twice.
const (
	benchTypes        = 10
	benchRoomsPerType = 50
	benchStaysPerRoom = 100
)

var benchYear = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// loadBenchHotel builds the hotel in a few set-based statements and returns
// its id. Each stay k of a room is a gap of 0–1 nights then 1–4 nights, so
// stay k starts no earlier than stay k−1 ends: a room's 100 stays span
// about 300 nights. One stay in ten is Cancelled, one in three CheckedIn.
func loadBenchHotel(tb testing.TB, pool *pgxpool.Pool) int64 {
	ctx := context.Background()
	var hotelID int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT setseed(0.42)`); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO hotels (name, timezone, currency)
			VALUES ('Bench', 'Asia/Seoul', 'KRW') RETURNING id`).Scan(&hotelID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO room_types (hotel_id, name)
			SELECT $1, 'Type ' || t FROM generate_series(1, $2) t`, hotelID, benchTypes); err != nil {
			return err
		}
		// A few rooms out of service or Dirty, as in a real hotel.
		if _, err := tx.Exec(ctx, `INSERT INTO rooms (hotel_id, room_type_id, number, status, housekeeping_status)
			SELECT $1, t.id, t.id || '-' || n,
				CASE WHEN n % 25 = 0 THEN 'OutOfService' ELSE 'Active' END,
				CASE WHEN n % 7 = 0 THEN 'Dirty' ELSE 'Clean' END
			FROM room_types t, generate_series(1, $2) n WHERE t.hotel_id = $1`, hotelID, benchRoomsPerType); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO stay_reservations
				(hotel_id, room_type_id, room_id, user_id, check_in, check_out, status)
			SELECT $1, room_type_id, room_id, 'user-' || (room_id * 1000 + k),
				$2::date + (sum(gap + len) OVER w)::int - len, $2::date + (sum(gap + len) OVER w)::int,
				CASE WHEN k % 10 = 0 THEN 'Cancelled' WHEN k % 3 = 0 THEN 'CheckedIn' ELSE 'Confirmed' END
			FROM (SELECT r.id AS room_id, r.room_type_id, k,
					floor(random() * 2)::int AS gap, 1 + floor(random() * 4)::int AS len
				FROM rooms r, generate_series(1, $3) k WHERE r.hotel_id = $1) s
			WINDOW w AS (PARTITION BY room_id ORDER BY k)`, hotelID, benchYear, benchStaysPerRoom)
		return err
	})
	require.NoError(tb, err)
	_, err = pool.Exec(ctx, `VACUUM ANALYZE hotels, room_types, rooms, stay_reservations`)
	require.NoError(tb, err)
	var n int
	require.NoError(tb, pool.QueryRow(ctx, `SELECT count(*) FROM stay_reservations`).Scan(&n))
	require.Equal(tb, benchTypes*benchRoomsPerType*benchStaysPerRoom, n)
	return hotelID
}

// seedBenchHolds puts a few live holds on every night of the range for each
// room type, straight into the per-night sorted sets HeldCounts reads.
func seedBenchHolds(tb testing.TB, pool *pgxpool.Pool, rdb redis.UniversalClient, hotelID int64, r domain.DateRange) {
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT id FROM room_types WHERE hotel_id = $1`, hotelID)
	require.NoError(tb, err)
	types, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(tb, err)
	exp := float64(time.Now().Add(time.Hour).UnixMilli())
	pipe := rdb.Pipeline()
	for _, rt := range types {
		for _, d := range r.Dates() {
			for i := range 3 {
				pipe.ZAdd(ctx, heldKey(rt, d.Format(domain.DateLayout)), redis.Z{Score: exp, Member: "h" + strconv.Itoa(i)})
			}
		}
	}
	_, err = pipe.Exec(ctx)
	require.NoError(tb, err)
}

// BenchmarkAvailability31Nights times Availability.Hotel, the path of the
// aggregate endpoint, over 31 nights of a hotel with 10 room types, 500 rooms
// and 50,000 stays, and reports its p50 and p99 latency.
func BenchmarkAvailability31Nights(b *testing.B) {
	_, pool := testenv.Postgres(b)
	_, rdb := testenv.Redis(b)
	hotelID := loadBenchHotel(b, pool)
	r, err := domain.ParseDateRange("2026-06-01", "2026-07-02")
	require.NoError(b, err)
	seedBenchHolds(b, pool, rdb, hotelID, r)
	av := NewAvailability(pool, NewHoldStore(rdb))
	q := AvailabilityQuery{HotelID: hotelID, Range: r, ExcludeDirty: true}
	ctx := context.Background()

	// The sub-benchmark runs more than once (b.N = 1 first); the fixture
	// above is built once.
	b.Run("aggregate", func(b *testing.B) {
		for range 20 { // warm the pool's connections and prepared statements
			_, err := av.Hotel(ctx, q, time.Now())
			require.NoError(b, err)
		}
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			out, err := av.Hotel(ctx, q, time.Now())
			lat = append(lat, time.Since(start))
			if err != nil || len(out.Items) != 31*benchTypes {
				b.Fatalf("items %d, err %v", len(out.Items), err)
			}
		}
		b.StopTimer()
		slices.Sort(lat)
		pct := func(p float64) float64 {
			return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
		}
		b.ReportMetric(pct(0.50), "p50-ms")
		b.ReportMetric(pct(0.99), "p99-ms")
	})
}
