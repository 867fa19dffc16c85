// Package apispec loads holdfast's OpenAPI document (api/openapi.yaml) with
// kin-openapi and checks HTTP answers against it. The end-to-end tests run
// every response through Check, so the document is proven against the real
// API on every test run rather than trusted.
package apispec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/holdfast/holdfast/api"
)

// Undocumented are the path prefixes the API serves that the document
// deliberately leaves out, with the reason. Responses under them are not
// checked; the route-coverage test keeps this list equal to what the API
// mounts.
var Undocumented = map[string]string{
	// Asynqmon's web UI and its JSON API: a third-party operator tool whose
	// routes and payloads are Asynqmon's, not holdfast's contract. Only the
	// admin guard in front of it is ours.
	"/monitoring": "Asynqmon UI (third-party), admin only",
}

// quiet makes a mismatch name the failing field and reason without the
// whole schema and value, which would drown the test log.
var quiet = []openapi3.SchemaValidationOption{openapi3.DisableSchemaErrorDetails()}

// Document is a parsed, validated OpenAPI document and its router.
type Document struct {
	T      *openapi3.T
	router routers.Router
	// errorSchema is the error envelope, for answers to routes the document
	// does not have (an unknown path must still get an envelope).
	errorSchema *openapi3.Schema
}

var loadOnce = sync.OnceValues(func() (*Document, error) { return Parse(api.OpenAPIDocument()) })

// Load returns the API's own document, parsed and validated once per process.
func Load() (*Document, error) { return loadOnce() }

// The pages and their assets are text bodies (a string schema), as
// /metrics is.
func init() {
	for _, t := range []string{"text/html", "text/javascript", "text/css"} {
		openapi3filter.RegisterBodyDecoder(t, openapi3filter.PlainBodyDecoder)
	}
}

// Parse loads an OpenAPI document, validates it and builds its router.
func Parse(data []byte) (*Document, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("apispec: load: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("apispec: invalid document: %w", err)
	}
	// The router matches method and path only. Given the document's servers
	// it would match only requests to that host, and the API under test
	// listens wherever it is started (a free port in the tests); the server
	// is a default for clients, not part of what is checked.
	routed := *doc
	routed.Servers = nil
	router, err := gorillamux.NewRouter(&routed)
	if err != nil {
		return nil, fmt.Errorf("apispec: router: %w", err)
	}
	envelope := doc.Components.Schemas["ErrorEnvelope"]
	if envelope == nil || envelope.Value == nil {
		return nil, errors.New("apispec: the document has no ErrorEnvelope schema")
	}
	return &Document{T: doc, router: router, errorSchema: envelope.Value}, nil
}

// Operations lists the documented operations as "METHOD /path/{param}".
func (d *Document) Operations() []string {
	var ops []string
	for path, item := range d.T.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, method+" "+path)
		}
	}
	slices.Sort(ops)
	return ops
}

// IsUndocumented reports whether path lies under a prefix of Undocumented.
func IsUndocumented(path string) bool {
	for prefix := range Undocumented {
		if path == prefix || strings.HasPrefix(path, prefix+"/") {
			return true
		}
	}
	return false
}

// Check validates one answer of the API: the status must be documented for
// the operation and the headers and body must match its response. An answer
// to a route the document does not have must be a 4xx error envelope (the
// API's catch-all 404, or a 401 that came first). Streaming bodies
// (text/event-stream) are checked for status and headers only; pass a nil
// body for them.
func (d *Document) Check(method, requestURI string, status int, header http.Header, body []byte) error {
	u, err := url.ParseRequestURI(requestURI)
	if err != nil {
		return fmt.Errorf("apispec: request URI %q: %w", requestURI, err)
	}
	if IsUndocumented(u.Path) {
		return nil
	}
	req, route, params, err := d.find(method, u)
	if errors.Is(err, routers.ErrPathNotFound) || errors.Is(err, routers.ErrMethodNotAllowed) {
		return d.checkUnrouted(method, u.Path, status, header, body)
	}
	if err != nil {
		return fmt.Errorf("apispec: %s %s: %w", method, u.Path, err)
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, SchemaValidationOptions: quiet}
	if IsEventStream(header) {
		opts.ExcludeResponseBody = true
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                opts,
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("apispec: %s %s → %d does not match the document: %w", method, route.Path, status, err)
	}
	return nil
}

func (d *Document) checkUnrouted(method, path string, status int, header http.Header, body []byte) error {
	if status < 400 || status >= 500 {
		return fmt.Errorf("apispec: %s %s is not in the document but answered %d (want a 4xx error envelope)", method, path, status)
	}
	if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("apispec: %s %s → %d: Content-Type %q, want the JSON error envelope", method, path, status, ct)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("apispec: %s %s → %d: body is not JSON: %w", method, path, status, err)
	}
	if err := d.errorSchema.VisitJSON(v, quiet...); err != nil {
		return fmt.Errorf("apispec: %s %s → %d: not an error envelope: %w", method, path, status, err)
	}
	return nil
}

// IsEventStream reports whether an answer is a Server-Sent Events stream,
// whose body never ends and so cannot be read whole.
func IsEventStream(header http.Header) bool {
	return strings.HasPrefix(header.Get("Content-Type"), "text/event-stream")
}

// Describes reports whether the document has an operation for method and
// the path of requestURI.
func (d *Document) Describes(method, requestURI string) bool {
	u, err := url.ParseRequestURI(requestURI)
	if err != nil {
		return false
	}
	_, _, _, err = d.find(method, u)
	return err == nil
}

// find is the document's operation for method and u, with its path
// parameters and the request it was matched as.
func (d *Document) find(method string, u *url.URL) (*http.Request, *routers.Route, map[string]string, error) {
	req := &http.Request{Method: method, URL: u, Host: "holdfast", Header: http.Header{}}
	route, params, err := d.router.FindRoute(req)
	return req, route, params, err
}
