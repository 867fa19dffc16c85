package events

import (
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Bounds of an event's details.
const (
	maxVenue    = 200  // characters
	maxImageURL = 2000 // bytes
)

// Details are what the pages show of an event beside its name (issue 49):
// when it starts, where, and an image. All are optional, and shown by the
// admin's and the public view of an event alike.
type Details struct {
	StartsAt *time.Time `json:"startsAt"`
	Venue    *string    `json:"venue"`
	ImageURL *string    `json:"imageUrl"`
}

// applyDetails validates startsAt, venue and imageUrl and applies them to
// e: null clears one, absent keeps it.
func (in settingsInput) applyDetails(e Event) (Event, error) {
	switch s := in.StartsAt; {
	case s.Null:
		e.StartsAt = nil
	case s.Set:
		t, err := time.Parse(time.RFC3339, s.V)
		if err != nil || t.Year() < 2000 {
			return e, invalidField("startsAt", "startsAt must be an RFC 3339 time from the year 2000 on, such as 2026-12-01T19:30:00+01:00")
		}
		t = t.UTC().Truncate(time.Second)
		e.StartsAt = &t
	}
	switch v := in.Venue; {
	case v.Null:
		e.Venue = nil
	case v.Set:
		if !plainText(v.V, maxVenue) {
			return e, invalidField("venue", "venue must be 1 to %d characters of text on one line, or null for none", maxVenue)
		}
		e.Venue = &v.V
	}
	switch u := in.ImageURL; {
	case u.Null:
		e.ImageURL = nil
	case u.Set:
		if !httpsURL(u.V, maxImageURL) {
			return e, invalidField("imageUrl", "imageUrl must be an https URL of at most %d characters, or null for none", maxImageURL)
		}
		e.ImageURL = &u.V
	}
	return e, nil
}

// plainText reports whether v is valid UTF-8 of 1 to max characters, not
// all blank, with no control characters (a line break among them).
func plainText(v string, max int) bool {
	if strings.TrimSpace(v) == "" || !utf8.ValidString(v) || utf8.RuneCountInString(v) > max {
		return false
	}
	return strings.IndexFunc(v, unicode.IsControl) < 0
}

// httpsURL reports whether v is an absolute https URL with a host and no
// user info, of at most max bytes. The scheme is spelled in lower case, as
// the database's check wants it (url.Parse would accept HTTPS: too).
func httpsURL(v string, max int) bool {
	if len(v) > max || !strings.HasPrefix(v, "https://") || strings.ContainsAny(v, "\\\x00\r\n\t ") {
		return false
	}
	u, err := url.Parse(v)
	return err == nil && u.Scheme == "https" && u.Hostname() != "" && u.User == nil
}
