package apispec_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/internal/apispec"
)

const (
	requestID = "0190f5a4-7a1b-7c3d-8e4f-0123456789ab"
	holdID    = "7-0190f5a4-7a1b-7c3d-8e4f-0123456789ab"
)

func jsonHeader() http.Header { return http.Header{"Content-Type": {"application/json"}} }

func acceptedHeader() http.Header {
	h := jsonHeader()
	h.Set("Location", "/api/v1/requests/"+requestID)
	return h
}

const acceptedBody = `{"requestId":"` + requestID + `","status":"queued","statusUrl":"/api/v1/requests/` + requestID + `"}`

const validHold = `{"holdId":"` + holdID + `","roomTypeId":7,"checkIn":"2030-01-01","checkOut":"2030-01-03",
	"userId":"u1","clientHoldKey":"0190f5a4-7a1b-7c3d-8e4f-0123456789ab",
	"createdAt":"2030-01-01T00:00:00Z","expiresAt":"2030-01-01T00:10:00Z","reused":false}`

func requestView(typ, result string) string {
	return `{"requestId":"` + requestID + `","type":"` + typ + `","status":"succeeded",
		"acceptedAt":"2030-01-01T00:00:00Z","completedAt":"2030-01-01T00:00:01Z","result":` + result + `,"error":null}`
}

// queuedView is a request of typ with no outcome yet: result and error null.
func queuedView(typ string) string {
	return `{"requestId":"` + requestID + `","type":"` + typ + `","status":"queued",
		"acceptedAt":"2030-01-01T00:00:00Z","completedAt":null,"result":null,"error":null}`
}

// rejectedView is a rejected request of typ: result null, error problem.
func rejectedView(typ, problem string) string {
	return `{"requestId":"` + requestID + `","type":"` + typ + `","status":"rejected",
		"acceptedAt":"2030-01-01T00:00:00Z","completedAt":"2030-01-01T00:00:01Z","result":null,"error":` + problem + `}`
}

const stayReservation = `{"reservationId":1,"hotelId":1,"roomTypeId":7,"roomId":3,"userId":"u1","holdId":"` + holdID + `",
	"checkIn":"2030-01-01","checkOut":"2030-01-03","status":"Confirmed","createdAt":"2030-01-01T00:00:01Z"}`

func envelope(code string) string {
	return `{"error":{"code":"` + code + `","message":"m","traceId":"t","meta":{}}}`
}

// TestCheckAcceptsAndRejects: the validator passes answers that match the
// document and catches each kind of mismatch, so the end-to-end suite's
// checks can fail (each "bad" case is a control for its "good" twin).
func TestCheckAcceptsAndRejects(t *testing.T) {
	doc, err := apispec.Load()
	require.NoError(t, err)
	cases := []struct {
		name         string
		method, uri  string
		status       int
		header       http.Header
		body         string
		wantMismatch bool
	}{
		{"health", "GET", "/healthz", 200, jsonHeader(), `{"status":"ok","version":"v1.2.3","revision":"abc"}`, false},
		{"health, wrong value", "GET", "/healthz", 200, jsonHeader(), `{"status":"fine","version":"v1.2.3","revision":"abc"}`, true},
		{"health, without its build", "GET", "/healthz", 200, jsonHeader(), `{"status":"ok"}`, true},
		{"health, undocumented status", "GET", "/healthz", 418, jsonHeader(), envelope("INVALID_INPUT"), true},
		{"hold", "GET", "/api/v1/holds/" + holdID, 200, jsonHeader(), validHold, false},
		{"hold, required field missing", "GET", "/api/v1/holds/" + holdID, 200, jsonHeader(),
			strings.Replace(validHold, `,"reused":false`, "", 1), true},
		{"hold, undocumented field", "GET", "/api/v1/holds/" + holdID, 200, jsonHeader(),
			strings.Replace(validHold, `"reused":false`, `"reused":false,"extra":1`, 1), true},
		{"hold, wrong content type", "GET", "/api/v1/holds/" + holdID, 200, http.Header{"Content-Type": {"text/html"}}, validHold, true},
		{"accepted", "POST", "/api/v1/probe", 202, acceptedHeader(), acceptedBody, false},
		{"accepted without Location", "POST", "/api/v1/probe", 202, jsonHeader(), acceptedBody, true},
		{"request view", "GET", "/api/v1/requests/" + requestID + "?wait=10s", 200, jsonHeader(),
			requestView("probe.incr", `{"values":{"a":1}}`), false},
		{"request view, result of another type", "GET", "/api/v1/requests/" + requestID, 200, jsonHeader(),
			requestView("hold.create", `{"values":{"a":1}}`), true},
		{"request view, unknown type", "GET", "/api/v1/requests/" + requestID, 200, jsonHeader(),
			requestView("hold.teleport", `null`), true},
		// The nullable results, error and holdId: null passes, and a value
		// must still match the schema it refers to.
		{"request view, queued", "GET", "/api/v1/requests/" + requestID, 200, jsonHeader(), queuedView("hold.confirm"), false},
		{"request view, a reservation", "GET", "/api/v1/requests/" + requestID, 200, jsonHeader(),
			requestView("hold.confirm", stayReservation), false},
		{"request view, a reservation without a hold", "GET", "/api/v1/requests/" + requestID, 200, jsonHeader(),
			requestView("hold.confirm", strings.Replace(stayReservation, `"`+holdID+`"`, `null`, 1)), false},
		{"request view, a reservation with a malformed holdId", "GET", "/api/v1/requests/" + requestID, 200, jsonHeader(),
			requestView("hold.confirm", strings.Replace(stayReservation, holdID, "nope", 1)), true},
		{"request view, a result that is not an object", "GET", "/api/v1/requests/" + requestID, 200, jsonHeader(),
			requestView("hold.create", `"x"`), true},
		{"request view, rejected", "GET", "/api/v1/requests/" + requestID, 200, jsonHeader(),
			rejectedView("hold.create", `{"code":"NOT_AVAILABLE","message":"m","httpStatus":409}`), false},
		{"request view, an error that is not a problem", "GET", "/api/v1/requests/" + requestID, 200, jsonHeader(),
			rejectedView("hold.create", `{"code":"NOT_AVAILABLE"}`), true},
		{"error envelope", "POST", "/api/v1/probe", 400, jsonHeader(), envelope("INVALID_INPUT"), false},
		{"error envelope, code of another status", "POST", "/api/v1/probe", 400, jsonHeader(), envelope("NOT_FOUND"), true},
		{"error envelope, unknown code", "POST", "/api/v1/probe", 400, jsonHeader(), envelope("OOPS"), true},
		{"error envelope, no traceId", "POST", "/api/v1/probe", 400, jsonHeader(),
			`{"error":{"code":"INVALID_INPUT","message":"m","meta":{}}}`, true},
		{"429 with Retry-After", "POST", "/api/v1/probe", 429, http.Header{"Content-Type": {"application/json"}, "Retry-After": {"1"}},
			envelope("OVERLOADED"), false},
		{"429 without Retry-After", "POST", "/api/v1/probe", 429, jsonHeader(), envelope("OVERLOADED"), true},
		{"unknown route, 404 envelope", "GET", "/api/v1/nothing-here", 404, jsonHeader(), envelope("NOT_FOUND"), false},
		{"unknown method, 404 envelope", "DELETE", "/api/v1/probe", 404, jsonHeader(), envelope("NOT_FOUND"), false},
		{"unknown route answered 200", "GET", "/api/v1/nothing-here", 200, jsonHeader(), `{}`, true},
		{"unknown route, not an envelope", "GET", "/api/v1/nothing-here", 404, jsonHeader(), `{"message":"no"}`, true},
		{"excluded prefix", "GET", "/monitoring/api/queues", 200, http.Header{"Content-Type": {"text/html"}}, `<html>`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := doc.Check(tc.method, tc.uri, tc.status, tc.header, []byte(tc.body))
			if tc.wantMismatch {
				require.Error(t, err)
				t.Log(err)
			} else {
				require.NoError(t, err)
			}
		})
	}
}

// TestErrorCodeEnumMatchesTheCode: the document's ErrorCode enum lists
// exactly the error codes the Go code declares (constants named Code… with
// a string value), so a new code cannot reach clients undocumented.
func TestErrorCodeEnumMatchesTheCode(t *testing.T) {
	doc, err := apispec.Load()
	require.NoError(t, err)
	var documented []string
	for _, v := range doc.T.Components.Schemas["ErrorCode"].Value.Enum {
		documented = append(documented, v.(string))
	}
	declared := declaredErrorCodes(t, moduleRoot(t))
	require.Contains(t, declared, "INVALID_INPUT", "the scan finds the codes")
	slices.Sort(documented)
	require.Equal(t, declared, documented)
}

func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the test")
		dir = parent
	}
}

// declaredErrorCodes parses the module's non-test Go files for string
// constants whose name starts with Code.
func declaredErrorCodes(t *testing.T, root string) []string {
	var codes []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Code") || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, err := strconv.Unquote(lit.Value)
						require.NoError(t, err)
						codes = append(codes, v)
					}
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	slices.Sort(codes)
	return slices.Compact(codes)
}

// The Go client declares a constant for every documented error code, and
// none the document lacks.
func TestGoClientDeclaresEveryErrorCode(t *testing.T) {
	doc, err := apispec.Load()
	require.NoError(t, err)
	var documented []string
	for _, v := range doc.T.Components.Schemas["ErrorCode"].Value.Enum {
		documented = append(documented, v.(string))
	}
	slices.Sort(documented)
	require.Equal(t, documented, declaredErrorCodes(t, filepath.Join(moduleRoot(t), "client")))
}

// Every error code the README and the API docs name is one the OpenAPI
// document declares, so the prose cannot drift from the contract: an
// all-capitals word in backticks is an error code unless it is a setting
// (an environment variable the config reads) or one of a few SQL words and
// stored states the docs quote.
func TestDocsNameOnlyDocumentedErrorCodes(t *testing.T) {
	doc, err := apispec.Load()
	require.NoError(t, err)
	codes := map[string]bool{}
	for _, v := range doc.T.Components.Schemas["ErrorCode"].Value.Enum {
		codes[v.(string)] = true
	}
	settings := map[string]bool{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for f := range t.Fields() {
			if name, _, _ := strings.Cut(f.Tag.Get("env"), ","); name != "" {
				settings[name] = true
			} else if f.Type.Kind() == reflect.Struct { // a group of settings: Redis, IdentityProvider
				walk(f.Type)
			}
		}
	}
	walk(reflect.TypeFor[config.Config]())
	quoted := map[string]bool{ // SQL and the states of stored rows
		"UPDATE": true, "TIME": true, "RESERVED": true, "CONFIRMED": true, "EXPIRED": true,
	}
	root := moduleRoot(t)
	var files []string // what a client reads
	for _, f := range []string{"README.md", "docs/api.md", "docs/stays.md", "docs/shop.md", "docs/events.md", "docs/waiting-room.md", "docs/pages.md"} {
		files = append(files, filepath.Join(root, f))
	}
	span := regexp.MustCompile("`[^`\n]+`")
	word := regexp.MustCompile(`\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*\b`)
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, s := range span.FindAllString(string(b), -1) {
			for _, w := range word.FindAllString(s, -1) {
				if len(w) < 5 || settings[w] || quoted[w] || strings.ContainsAny(s, "/=$") { // a route, an assignment, a command line
					continue
				}
				seen++
				require.True(t, codes[w], "%s names %s (in %s), which the OpenAPI document's ErrorCode does not declare", filepath.Base(f), w, s)
			}
		}
	}
	require.Greater(t, seen, 40, "the check found the codes the docs name")
}
