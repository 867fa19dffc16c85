package events

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/api"
	"github.com/holdfast/holdfast/domain"
)

func decodeSettings(t *testing.T, body string) settingsInput {
	t.Helper()
	var in settingsInput
	require.NoError(t, api.DecodeJSON([]byte(body), &in))
	return in
}

// Settings on creation: defaults, every bound, the times' order, and what a
// return URL may be.
func TestSettingsOnCreation(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	e, err := decodeSettings(t, `{}`).apply(newEventSettings(), now, true)
	require.NoError(t, err)
	require.Equal(t, []any{800, 300, 60, 60, (*int)(nil), false, true},
		[]any{e.MaxConcurrent, e.TokenTTLSeconds, e.PresenceTimeoutSeconds, e.ClaimWindowSeconds, e.AdmitPerMinute, e.AdmissionPaused, e.EntryTokenRequired})

	e, err = decodeSettings(t, `{"presenceTimeoutSeconds": 2, "claimWindowSeconds": 3, "admitPerMinute": 600,
		"queueOpensAt": "2026-11-25T11:00:00Z", "salesStartAt": "2026-11-25T22:00:00+09:00", "returnUrl": "https://shop.example/checkout?x=1"}`).
		apply(newEventSettings(), now, true)
	require.NoError(t, err)
	require.Equal(t, 2, e.PresenceTimeoutSeconds)
	require.Equal(t, 600, *e.AdmitPerMinute)
	require.Equal(t, time.Date(2026, 11, 25, 11, 0, 0, 0, time.UTC), *e.QueueOpensAt, "a queue may open in the past: it is open")
	require.Equal(t, time.Date(2026, 11, 25, 13, 0, 0, 0, time.UTC), *e.SalesStartAt)

	for _, c := range []struct{ body, code, field string }{
		{`{"presenceTimeoutSeconds": 0}`, domain.CodeInvalidInput, "presenceTimeoutSeconds"},
		{`{"presenceTimeoutSeconds": -5}`, domain.CodeInvalidInput, "presenceTimeoutSeconds"},
		{`{"claimWindowSeconds": 3601}`, domain.CodeInvalidInput, "claimWindowSeconds"},
		{`{"maxConcurrent": 0}`, domain.CodeInvalidInput, "maxConcurrent"},
		{`{"tokenTtlSeconds": 86401}`, domain.CodeInvalidInput, "tokenTtlSeconds"},
		{`{"admitPerMinute": 0}`, domain.CodeInvalidInput, "admitPerMinute"},
		{`{"admitPerMinute": 1000001}`, domain.CodeInvalidInput, "admitPerMinute"},
		{`{"salesStartAt": "2026-11-25T11:00:00Z"}`, domain.CodeInvalidInput, "salesStartAt"},
		{`{"salesStartAt": "9999-01-01T00:00:00Z"}`, domain.CodeInvalidInput, "salesStartAt"},
		{`{"salesStartAt": "tomorrow"}`, domain.CodeInvalidInput, "salesStartAt"},
		{`{"queueOpensAt": "1970-01-01T00:00:00Z"}`, domain.CodeInvalidInput, "queueOpensAt"},
		{`{"queueOpensAt": "2026-11-25T14:00:00Z", "salesStartAt": "2026-11-25T13:00:00Z"}`, domain.CodeInvalidDateRange, "salesStartAt"},
		{`{"queueOpensAt": "2026-11-25T13:00:00Z", "salesStartAt": "2026-11-25T13:00:00Z"}`, domain.CodeInvalidDateRange, "salesStartAt"},
		{`{"returnUrl": "http://shop.example/"}`, domain.CodeInvalidInput, "returnUrl"},
		{`{"returnUrl": "javascript:alert(1)"}`, domain.CodeInvalidInput, "returnUrl"},
		{`{"returnUrl": "//evil.example/"}`, domain.CodeInvalidInput, "returnUrl"},
		{`{"returnUrl": "https://user:pw@shop.example/"}`, domain.CodeInvalidInput, "returnUrl"},
		{`{"returnUrl": "/\\evil.example"}`, domain.CodeInvalidInput, "returnUrl"},
		{`{"returnUrl": ""}`, domain.CodeInvalidInput, "returnUrl"},
		{`{"returnUrl": "checkout"}`, domain.CodeInvalidInput, "returnUrl"},
		{`{"salesStartAt": null}`, domain.CodeInvalidInput, "salesStartAt"},
	} {
		_, err := decodeSettings(t, c.body).apply(newEventSettings(), now, true)
		p, ok := domain.AsProblem(err)
		require.True(t, ok, "%s: %v", c.body, err)
		require.Equal(t, c.code, p.Code, c.body)
		require.Equal(t, c.field, p.Meta["field"], c.body)
	}
	_, err = decodeSettings(t, `{"returnUrl": "/events/7/seats-page"}`).apply(newEventSettings(), now, true)
	require.NoError(t, err, "a path on this site")
}

// Later changes: null clears the optional settings, absent keeps them; the
// queue times move only while what they name is still ahead.
func TestSettingsChanges(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	e, err := decodeSettings(t, `{"admitPerMinute": 60, "returnUrl": "/x", "queueOpensAt": "2026-11-25T12:30:00Z",
		"salesStartAt": "2026-11-25T13:00:00Z"}`).apply(newEventSettings(), now, true)
	require.NoError(t, err)

	changed, err := decodeSettings(t, `{"admitPerMinute": null, "admissionPaused": true}`).apply(e, now, false)
	require.NoError(t, err)
	require.Nil(t, changed.AdmitPerMinute)
	require.True(t, changed.AdmissionPaused)
	require.Equal(t, "/x", *changed.ReturnURL, "absent: unchanged")

	changed, err = decodeSettings(t, `{"salesStartAt": "2026-11-25T12:45:00Z"}`).apply(e, now, false)
	require.NoError(t, err, "before the start, the start may move")
	require.Equal(t, 45, changed.SalesStartAt.Minute())

	locked := func(body string, at time.Time, e Event) {
		t.Helper()
		_, err := decodeSettings(t, body).apply(e, at, false)
		p, ok := domain.AsProblem(err)
		require.True(t, ok, "%s: %v", body, err)
		require.Equal(t, domain.CodeSettingLocked, p.Code, body)
	}
	locked(`{"queueOpensAt": "2026-11-25T12:50:00Z"}`, now.Add(40*time.Minute), e)              // open already
	locked(`{"salesStartAt": "2026-11-25T14:00:00Z"}`, now.Add(61*time.Minute), e)              // started
	locked(`{"salesStartAt": "2026-11-25T14:00:00Z"}`, now, newEventSettings())                 // created without a pre-queue
	_, err = decodeSettings(t, `{"salesStartAt": "2026-11-25T12:20:00Z"}`).apply(e, now, false) // before the queue opens
	p, _ := domain.AsProblem(err)
	require.Equal(t, domain.CodeInvalidDateRange, p.Code)
}

// A PATCH body names only settings: anything else is refused.
func TestSettingsRefuseUnknownFields(t *testing.T) {
	var in settingsInput
	err := api.DecodeJSON([]byte(`{"name": "renamed"}`), &in)
	p, ok := domain.AsProblem(err)
	require.True(t, ok)
	require.Equal(t, "name", p.Meta["field"])
	require.Error(t, json.Unmarshal([]byte(`{"admitPerMinute": "many"}`), &in))
}

// NOT_YOUR_TURN says why: at the head of the line with every slot taken it
// does not speak of users ahead (rank 0 read as a contradiction).
func TestNotYourTurnSaysWhy(t *testing.T) {
	zero, two := int64(0), int64(2)
	head := notYourTurn(Status{Status: "waiting", Rank: &zero, AheadCount: &zero, reason: "full"})
	require.Contains(t, head.Message, "you are first in line")
	require.NotContains(t, head.Message, "ahead of you")
	behind := notYourTurn(Status{Status: "waiting", Rank: &two, AheadCount: &two, reason: "full"})
	require.Contains(t, behind.Message, "the users ahead of you go first")
	require.Equal(t, int64(2), behind.Meta["aheadCount"])
}
