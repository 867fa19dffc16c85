package events

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Bounds of a seat map: sections and rows per event, seats per row.
const (
	maxSections    = 100
	maxRows        = 500
	maxSeatsPerRow = 1000
	maxMapLabel    = 32
)

// Section is one section of an event's seat map. Sections are listed best
// first: best-available tries them in that order (their preference, 1 the
// best). Its rows too are listed best first, and a row's seats are numbered
// 1…n side by side.
type Section struct {
	Name      string `json:"name"`
	PriceTier string `json:"priceTier"`
	Rows      []Row  `json:"rows"`
}

// SectionInfo is a section as the seat list shows it.
type SectionInfo struct {
	Name       string `json:"name"`
	PriceTier  string `json:"priceTier"`
	Preference int    `json:"preference"` // 1 is the best
}

// Row is a row of a section: its label and how many seats it has.
type Row struct {
	Label string `json:"label"`
	Seats int    `json:"seats"`

	labels []string // the seats' labels when given one by one (plainMap)
}

// SeatMap is an event's seats, section by section.
type SeatMap []Section

// plainMap is the map of an event created with seatCount or a list of
// labels: one section, "General", of one row, "1".
func plainMap(labels []string) SeatMap {
	return SeatMap{{Name: "General", Rows: []Row{{Label: "1", Seats: len(labels), labels: labels}}}}
}

// mapSeat is one seat of a map as stored.
type mapSeat struct {
	label, section, row string
	rowNo, pos          int
}

// seats lists m's seats in the order their ids follow: sections by
// preference, rows, then positions. A seat of a plain map is labelled as
// given; one of a map made of sections is "Section Row-Number".
func (m SeatMap) seats() []mapSeat {
	var out []mapSeat
	for _, s := range m {
		for rowNo, r := range s.Rows {
			for i := range r.Seats {
				label := fmt.Sprintf("%s %s-%d", s.Name, r.Label, i+1)
				if r.labels != nil {
					label = r.labels[i]
				}
				out = append(out, mapSeat{label: label, section: s.Name, row: r.Label, rowNo: rowNo, pos: i + 1})
			}
		}
	}
	return out
}

// check validates a map from a request; it returns the number of seats.
func (m SeatMap) check() (int, error) {
	if len(m) == 0 || len(m) > maxSections {
		return 0, invalidField("sections", "an event has 1 to %d sections", maxSections)
	}
	names := map[string]bool{}
	total := 0
	for i := range m {
		s := &m[i]
		if err := checkMapLabel("sections", "section name", s.Name); err != nil {
			return 0, err
		}
		if names[s.Name] {
			return 0, invalidField("sections", "section %q is named twice", s.Name)
		}
		names[s.Name] = true
		if len(s.PriceTier) > maxMapLabel {
			return 0, invalidField("sections", "a price tier is at most %d characters", maxMapLabel)
		}
		if len(s.Rows) == 0 || len(s.Rows) > maxRows {
			return 0, invalidField("sections", "section %q must have 1 to %d rows", s.Name, maxRows)
		}
		rows := map[string]bool{}
		for _, r := range s.Rows {
			if err := checkMapLabel("sections", "row label", r.Label); err != nil {
				return 0, err
			}
			if rows[r.Label] {
				return 0, invalidField("sections", "row %q of section %q is named twice", r.Label, s.Name)
			}
			rows[r.Label] = true
			if r.Seats < 1 || r.Seats > maxSeatsPerRow {
				return 0, invalidField("sections", "a row has 1 to %d seats", maxSeatsPerRow)
			}
			total += r.Seats
		}
	}
	if total > MaxSeats {
		return 0, invalidField("sections", "at most %d seats", MaxSeats)
	}
	return total, nil
}

// checkMapLabel refuses an empty, long or untidy name of a section or row.
func checkMapLabel(field, what, v string) error {
	if strings.TrimSpace(v) != v || v == "" || len(v) > maxMapLabel || strings.ContainsAny(v, "\x00\r\n\t") {
		return invalidField(field, "a %s is 1 to %d characters, without spaces around it", what, maxMapLabel)
	}
	return nil
}

// plainLabels numbers n seats "1".."n".
func plainLabels(n int) []string {
	labels := make([]string, n)
	for i := range labels {
		labels[i] = strconv.Itoa(i + 1)
	}
	return labels
}

// insertSeatMap stores event ev's sections and seats. Seat ids follow the
// map's order, so FCFS hands the best seats out first.
func insertSeatMap(ctx context.Context, tx pgx.Tx, ev int64, m SeatMap, seats []mapSeat) error {
	names, tiers, prefs := make([]string, len(m)), make([]string, len(m)), make([]int32, len(m))
	for i, s := range m {
		names[i], tiers[i], prefs[i] = s.Name, s.PriceTier, int32(i+1)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO event_sections (event_id, name, price_tier, preference)
		SELECT $1, n, t, p FROM unnest($2::text[], $3::text[], $4::int[]) AS s(n, t, p)`, ev, names, tiers, prefs); err != nil {
		return err
	}
	labels, sections, rows := make([]string, len(seats)), make([]string, len(seats)), make([]string, len(seats))
	rowNos, pos := make([]int32, len(seats)), make([]int32, len(seats))
	for i, s := range seats {
		labels[i], sections[i], rows[i], rowNos[i], pos[i] = s.label, s.section, s.row, int32(s.rowNo), int32(s.pos)
	}
	_, err := tx.Exec(ctx, `INSERT INTO seats (event_id, label, section, row_label, row_no, pos)
		SELECT $1, l, s, r, rn, p FROM unnest($2::text[], $3::text[], $4::text[], $5::int[], $6::int[])
			WITH ORDINALITY AS m(l, s, r, rn, p, n) ORDER BY n`, ev, labels, sections, rows, rowNos, pos)
	return err
}
