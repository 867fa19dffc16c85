package lincheck

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/systest"
	"github.com/holdfast/holdfast/requests"
)

// Answer is what a client learnt of a write: its Outcome without a Value
// (the caller reads Result or Meta into its model's value), and the
// succeeded request's result or the refusal's meta.
type Answer struct {
	Outcome
	Result json.RawMessage
	Meta   map[string]any
	// Door is the HTTP status the write itself was answered with (0: no
	// answer), and Located whether that answer named the request's
	// Location.
	Door    int
	Located bool
}

// Patience is how long Await follows a write before it calls the outcome
// unknown.
const Patience = 60 * time.Second

// Await sends a write as a client that wants its outcome: with Prefer:
// wait=10, and, when that is answered 202 before the outcome, by long
// polls of GET /api/v1/requests/{id} until the request is terminal, for up
// to Patience. A transport error on the write, or no terminal answer in
// time, is an unknown outcome; any other answer to the write is not
// accepted, but a 503 with Location (Postgres did not confirm whether it
// stored the write), which is followed as a 202 is, to its outcome or to
// NOT_STORED (not accepted).
func Await(c *systest.Client, method, path string, body any, headers ...string) Answer {
	deadline := time.Now().Add(Patience)
	r, err := c.TryDo(method, path, body, append([]string{"Prefer", "wait=10"}, headers...)...)
	ans := await(c, r, err, deadline)
	if err == nil {
		ans.Door, ans.Located = r.Status, r.Header.Get("Location") != ""
	}
	return ans
}

// await follows the write's answer r (or its error) to an Answer.
func await(c *systest.Client, r systest.Response, err error, deadline time.Time) Answer {
	switch {
	case err != nil:
		return Answer{Outcome: Unknown()}
	case r.Status == http.StatusOK:
		return fromBody(r.Body)
	case r.Status != http.StatusAccepted && r.Header.Get("Location") == "":
		var e systest.Envelope
		_ = json.Unmarshal(r.Body, &e)
		return Answer{Outcome: NotAccepted(e.Error.Code)}
	}
	// A 202, or a 503 whose write may or may not be stored: its Location
	// tells which, once read.
	a := systest.Accepted{RequestID: strings.TrimPrefix(r.Header.Get("Location"), "/api/v1/requests/")}
	if r.Status == http.StatusAccepted && json.Unmarshal(r.Body, &a) != nil {
		return Answer{Outcome: Unknown()}
	}
	for time.Now().Before(deadline) {
		r, err := c.TryDo("GET", "/api/v1/requests/"+a.RequestID+"?wait=10s", nil)
		if err == nil && r.Status == http.StatusOK {
			if ans := fromBody(r.Body); ans.Status != "" {
				return ans
			}
			continue
		}
		// After a failed poll (a store down) the outcome is durable and
		// will be there: a 503 says when to look again; after a transport
		// error, a client's pace.
		if err != nil || !r.FollowRetryAfter() {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return Answer{Outcome: Outcome{Status: StatusUnknown, RequestID: a.RequestID}}
}

// fromBody reads a request view; a view not yet terminal is an Answer
// with no status.
func fromBody(body []byte) Answer {
	var v requests.View
	if json.Unmarshal(body, &v) != nil {
		return Answer{Outcome: Unknown()}
	}
	ans := Answer{Outcome: Outcome{RequestID: v.RequestID}}
	switch v.Status {
	case domain.StatusSucceeded:
		ans.Status, ans.Result = StatusOK, v.Result
	case domain.StatusRejected:
		ans.Status = StatusRefused
		if v.Error != nil {
			ans.Code, ans.Meta = v.Error.Code, v.Error.Meta
		}
	case domain.StatusFailed:
		ans.Status = StatusFailed
		if v.Error != nil && v.Error.Code == domain.CodeNotStored { // settled as never stored
			ans.Outcome = NotAccepted(domain.CodeNotStored)
			ans.RequestID = v.RequestID
		}
	}
	return ans
}
