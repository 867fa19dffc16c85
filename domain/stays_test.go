package domain

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseDateRange(t *testing.T) {
	cases := []struct {
		from, to, code string
		nights         int
	}{
		{"2025-12-24", "2025-12-27", "", 3},
		{"2025-12-24", "2026-01-24", "", 31},
		{"2025-12-24", "2026-01-25", CodeDateRangeTooLong, 0},
		{"2025-12-24", "2025-12-24", CodeInvalidDateRange, 0},
		{"2025-12-27", "2025-12-24", CodeInvalidDateRange, 0},
		{"2025-02-30", "2025-03-02", CodeInvalidDateRange, 0},
		{"24/12/2025", "2025-12-27", CodeInvalidDateRange, 0},
		{"", "2025-12-27", CodeInvalidDateRange, 0},
	}
	for _, c := range cases {
		r, err := ParseDateRange(c.from, c.to)
		if c.code == "" {
			require.NoError(t, err)
			require.Equal(t, c.nights, r.Nights())
			require.Len(t, r.Dates(), c.nights)
			continue
		}
		p, ok := AsProblem(err)
		require.True(t, ok, "%s..%s", c.from, c.to)
		require.Equal(t, c.code, p.Code)
		require.Equal(t, 400, p.HTTPStatus)
	}
}

func TestStayTransition(t *testing.T) {
	next, err := StayTransition(StayConfirmed, "check-in")
	require.NoError(t, err)
	require.Equal(t, StayCheckedIn, next)
	next, err = StayTransition(StayCheckedIn, "check-out")
	require.NoError(t, err)
	require.Equal(t, StayCheckedOut, next)
	_, err = StayTransition(StayCheckedOut, "cancel")
	p, _ := AsProblem(err)
	require.Equal(t, CodeInvalidTransition, p.Code)
	_, err = StayTransition(StayConfirmed, "check-out")
	require.Error(t, err)
}
