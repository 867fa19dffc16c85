package systest

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/apispec"
)

// checkedTransport checks every answer of the API against the OpenAPI
// document (api/openapi.yaml, through internal/apispec) and fails the test
// on a mismatch: an undocumented status, a missing required header, a body
// that does not match the operation's schema, or anything but an error
// envelope from a route the document lacks. Every client of the end-to-end
// suite goes through it, so the whole suite is the document's
// response-validation test, deliberately bad input included.
type checkedTransport struct {
	base http.RoundTripper
	t    testing.TB
}

func (ct *checkedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := ct.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	doc, err := apispec.Load()
	if err != nil {
		ct.t.Errorf("openapi: %v", err)
		return resp, nil
	}
	var body []byte
	if !apispec.IsEventStream(resp.Header) { // an event stream never ends: status and headers only
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
	}
	if err := doc.Check(req.Method, req.URL.RequestURI(), resp.StatusCode, resp.Header, body); err != nil {
		ct.t.Errorf("openapi: %v\nresponse body: %.2000s", err, body)
	}
	return resp, nil
}

// HTTPClient returns an HTTP client for the API whose every answer is
// checked against the OpenAPI document, failing t on a mismatch. Inside a
// fuzz target pass the target's *testing.T: a *testing.F may not fail there.
func (s *System) HTTPClient(t testing.TB) *http.Client {
	return &http.Client{Transport: &checkedTransport{base: transport, t: t}, Timeout: 60 * time.Second}
}
