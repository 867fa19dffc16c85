package events

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
)

// An event's details: set, kept when absent, cleared by null; bad values
// are 400 INVALID_INPUT naming the field.
func TestEventDetails(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	e, err := decodeSettings(t, `{"startsAt": "2026-12-12T19:30:00+01:00", "venue": "Town Hall, Leeds",
		"imageUrl": "https://cdn.example/poster.jpg?w=800"}`).apply(newEventSettings(), now, true)
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 12, 12, 18, 30, 0, 0, time.UTC), *e.StartsAt)
	require.Equal(t, "Town Hall, Leeds", *e.Venue)
	require.Equal(t, "https://cdn.example/poster.jpg?w=800", *e.ImageURL)

	kept, err := decodeSettings(t, `{"admissionPaused": true}`).apply(e, now, false)
	require.NoError(t, err)
	require.Equal(t, e.Details, kept.Details, "absent: unchanged")
	cleared, err := decodeSettings(t, `{"startsAt": null, "venue": null, "imageUrl": null}`).apply(e, now, false)
	require.NoError(t, err)
	require.Equal(t, Details{}, cleared.Details)
	past, err := decodeSettings(t, `{"startsAt": "2020-01-01T00:00:00Z"}`).apply(e, now, false)
	require.NoError(t, err, "an event may have started already")
	require.Equal(t, 2020, past.StartsAt.Year())
	long, err := decodeSettings(t, `{"venue": "`+strings.Repeat("é", maxVenue)+`"}`).apply(e, now, false)
	require.NoError(t, err, "200 characters, not bytes")
	require.Equal(t, maxVenue, len([]rune(*long.Venue)))

	for _, c := range []struct{ body, field string }{
		{`{"startsAt": "next friday"}`, "startsAt"},
		{`{"startsAt": "2026-12-12 19:30"}`, "startsAt"},
		{`{"startsAt": "1999-12-31T23:00:00Z"}`, "startsAt"},
		{`{"venue": ""}`, "venue"},
		{`{"venue": "   "}`, "venue"},
		{`{"venue": "Hall\nB"}`, "venue"},
		{`{"venue": "` + strings.Repeat("a", maxVenue+1) + `"}`, "venue"},
		{`{"imageUrl": "http://cdn.example/poster.jpg"}`, "imageUrl"},
		{`{"imageUrl": "HTTPS://cdn.example/poster.jpg"}`, "imageUrl"},
		{`{"imageUrl": "/poster.jpg"}`, "imageUrl"},
		{`{"imageUrl": "https:///poster.jpg"}`, "imageUrl"},
		{`{"imageUrl": "https://user:pw@cdn.example/p.jpg"}`, "imageUrl"},
		{`{"imageUrl": "javascript:alert(1)"}`, "imageUrl"},
		{`{"imageUrl": "data:image/png;base64,AAAA"}`, "imageUrl"},
		{`{"imageUrl": "https://cdn.example/a b.jpg"}`, "imageUrl"},
		{`{"imageUrl": "https://cdn.example/` + strings.Repeat("a", maxImageURL) + `"}`, "imageUrl"},
	} {
		_, err := decodeSettings(t, c.body).apply(e, now, false)
		p, ok := domain.AsProblem(err)
		require.True(t, ok, "%s: %v", c.body, err)
		require.Equal(t, domain.CodeInvalidInput, p.Code, c.body)
		require.Equal(t, c.field, p.Meta["field"], c.body)
	}
}
