package events

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/domain"
)

// freeSeat is a free seat where the map puts it.
type freeSeat struct {
	id      int64
	section string
	rowNo   int
	pos     int
	used    bool // taken by an earlier request of the batch
}

// freeSeats are an event's free seats in id order, which is the map's order
// of preference: best section first, then rows, then positions.
type freeSeats struct {
	seats []freeSeat
	at    map[int64]int // seat id → index
}

// readFreeSeats reads event ev's free seats: all of them, or those of
// only when it is not nil (a batch of holds of seats named by id reads no
// more than those, whatever the size of the map). A batch that asks for
// the best seats reads them all, one row each, so its cost grows with the
// free seats of the map; a rush shares it out over the batch's requests
// (figures in docs/events.md).
func readFreeSeats(ctx context.Context, tx pgx.Tx, ev int64, only []int64) (*freeSeats, error) {
	rows, err := tx.Query(ctx, `SELECT id, section, row_no, pos FROM seats
		WHERE event_id = $1 AND NOT reserved AND ($2::bigint[] IS NULL OR id = ANY($2)) ORDER BY id`, ev, only)
	if err != nil {
		return nil, err
	}
	seats, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (freeSeat, error) {
		var s freeSeat
		return s, r.Scan(&s.id, &s.section, &s.rowNo, &s.pos)
	})
	return newFreeSeats(seats), err
}

func newFreeSeats(seats []freeSeat) *freeSeats {
	f := &freeSeats{seats: seats, at: make(map[int64]int, len(seats))}
	for i, s := range seats {
		f.at[s.id] = i
	}
	return f
}

// named checks that every seat of ids is free.
func (f *freeSeats) named(ids []int64) ([]int64, *domain.Problem) {
	for _, id := range ids {
		if i, ok := f.at[id]; !ok || f.seats[i].used {
			return nil, domain.NewProblem(domain.CodeSeatTaken, "seat %d is taken; nothing was held", id).WithMeta("seatId", id)
		}
	}
	return ids, nil
}

// best picks n free seats of section (any section when empty): the first
// run of n side by side in one row, in the map's order of preference. When
// no row has such a run, apart allows the best n free seats wherever they
// are; otherwise nothing is held.
func (f *freeSeats) best(section string, n int, apart bool) ([]int64, *domain.Problem) {
	var run, scattered []int64
	available := 0 // counted to the end only when no run is found
	for i := range f.seats {
		s := &f.seats[i]
		if s.used || section != "" && s.section != section {
			continue
		}
		available++
		if len(scattered) < n {
			scattered = append(scattered, s.id)
		}
		if len(run) > 0 {
			prev := f.seats[f.at[run[len(run)-1]]]
			if prev.section != s.section || prev.rowNo != s.rowNo || prev.pos+1 != s.pos {
				run = run[:0]
			}
		}
		run = append(run, s.id)
		if len(run) == n {
			return run, nil
		}
	}
	switch {
	case available < n:
		return nil, domain.NewProblem(domain.CodeSoldOut, "fewer than %d seats are left", n).WithMeta("available", available)
	case apart:
		return scattered, nil
	}
	return nil, domain.NewProblem(domain.CodeSeatsNotTogether,
		"no %d seats side by side are left; ask for fewer, or allow seats apart", n).WithMeta("available", available)
}

// take marks seats used by this batch.
func (f *freeSeats) take(ids []int64) {
	for _, id := range ids {
		f.seats[f.at[id]].used = true
	}
}
