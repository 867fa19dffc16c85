package e2e

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/domain"
	"github.com/holdfast/holdfast/internal/apispec"
	"github.com/holdfast/holdfast/internal/systest"
)

// FuzzWriteOverHTTP sends arbitrary bodies and headers to a real API: the
// answer is a 202 or a 4xx error envelope, never a 5xx.
func FuzzWriteOverHTTP(f *testing.F) {
	f.Add([]byte(`{"keys":["a"]}`), "application/json", "k1")
	f.Add([]byte(`{"keys":["a"],"limit":"x"}`), "application/json", "")
	f.Add([]byte(`{"keys":["a"]`), "application/json; charset=utf-8", "k2")
	f.Add([]byte("\x00\x01"), "application/octet-stream", "\x7f")
	f.Add([]byte(`{"keys":["a"]}`), "", "key with spaces")
	f.Add([]byte(`{"keys":["a"],"limit":9223372036854775808}`), "application/json", "")
	s := systest.Start(f, systest.Options{})
	c := s.Client("fuzzer", domain.RoleUser) // made outside: f's helpers may not run in the target
	f.Fuzz(func(t *testing.T, body []byte, contentType, idemKey string) {
		headers := []string{"Content-Type", contentType}
		if idemKey != "" {
			headers = append(headers, "Idempotency-Key", idemKey)
		}
		r, err := c.WithT(t).TryDo("POST", "/api/v1/probe", body, headers...)
		if err != nil {
			unsent(t, err)
		}
		require.Less(t, r.Status, 500, "body: %s", r.Body)
		if r.Status != http.StatusAccepted {
			require.GreaterOrEqual(t, r.Status, 400)
			r.ErrorCode(t)
		}
	})
}

// unsent handles an input that got no answer: one net/http refuses to send
// (control bytes in a header, say) is skipped, but one the API left without
// an answer until the client's timeout fails: a hang is a defect, not a skip.
func unsent(t *testing.T, err error) {
	t.Helper()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("no answer: %v", err)
	}
	t.Skip("net/http refuses to send this input:", err)
}

// operationSeed is one call of a documented operation.
type operationSeed struct {
	op, param, query, body, header string
	staff                          bool
}

// operationSeeds are calls that reach past input checks into the stores.
var operationSeeds = []operationSeed{
	{"POST /api/v1/hotels", "", "", `{"name":"h","timezone":"Asia/Seoul","currency":"KRW"}`, "", true},
	{"POST /api/v1/hotels/{hotelId}/room-types", "1", "", `{"name":"double"}`, "", true},
	{"POST /api/v1/holds", "", "", `{"roomTypeId":1,"checkIn":"2030-02-30","checkOut":"2030-03-01","clientHoldKey":"k"}`, "", false},
	{"GET /api/v1/hotels/{hotelId}/availability", "1", "from=2030-01-31&to=2029-01-01", "", "", true},
	{"GET /api/v1/hotels/{hotelId}/reservations", "1", "limit=0&status=nope", "", "", true},
	{"POST /api/v1/events", "", "", `{"name":"e","seatCount":3,"fcfsEntryTokenRequired":true}`, "", true},
	{"POST /api/v1/events", "", "", `{"name":"e","seatCount":3,"seats":["a"]}`, "", true},
	{"POST /api/v1/events/{eventId}/seats/fcfs", "1", "", `{"phone":"+82 10\u0000"}`, "tok", false},
	{"POST /api/v1/events/{eventId}/seats/{seatId}/reservation", "-1", "", "", "not-a-token", false},
	{"PUT /api/v1/cart/items/{productOptionId}", "99999999999999999999", "", `{"quantity":1e3}`, "", false},
	{"GET /api/v1/requests/{id}", "0192f5a0-0000-7000-8000-000000000000", "wait=-1s", "", "", false},
	{"PATCH /api/v1/rooms/{roomId}", "1", "", `{"status":"ACTIVE","housekeepingStatus":null}`, "", true},
	{"PATCH /api/v1/events/{eventId}", "1", "", `{"salesStartAt":null,"admitPerMinute":null,"returnUrl":"//x"}`, "", true},
	{"POST /api/v1/events", "", "", `{"name":"e","seatCount":1,"queueOpensAt":"2030-01-01T00:00:00Z","salesStartAt":"2029-01-01T00:00:00Z"}`, "", true},
	{"GET /api/v1/public/events/{eventId}/prequeue", "1", "offset=99999999999999999999&limit=-", "", "", false},
	{"POST /api/v1/events", "", "", `{"name":"e","sections":[{"name":"A","rows":[{"label":"1","seats":3},{"label":"1","seats":0}]}]}`, "", true},
	{"POST /api/v1/events", "", "", `{"name":"e","sections":[{"name":" A","priceTier":null,"rows":[]}],"maxSeatsPerUser":0}`, "", true},
	{"POST /api/v1/events/{eventId}/holds", "1", "", `{"quantity":2,"section":"","apart":true}`, "", false},
	{"POST /api/v1/events/{eventId}/holds", "1", "", `{"seatIds":[1,-1,9223372036854775807]}`, "tok", false},
	{"POST /api/v1/events/{eventId}/holds/{holdId}/confirm", "1", "", `{"paymentReference":"\u0000"}`, "", false},
	{"DELETE /api/v1/events/{eventId}/holds/{holdId}", "9223372036854775807", "", "", "", false},
}

// pathParam matches a parameter of a path template, such as {hotelId}.
var pathParam = regexp.MustCompile(`\{[^}]+\}`)

// FuzzEveryOperationOverHTTP sends arbitrary path parameters, query strings,
// bodies and headers to every operation in the OpenAPI document, as a user
// or as an admin, to a real API with a worker behind it. The answer is never
// a 5xx, a 4xx carries the error envelope, and every answer matches the
// document (the suite's checked transport fails the input otherwise).
func FuzzEveryOperationOverHTTP(f *testing.F) {
	doc, err := apispec.Load()
	require.NoError(f, err)
	var ops []string
	for _, op := range doc.Operations() {
		if !strings.HasSuffix(op, "/stream") { // an event stream never ends
			ops = append(ops, op)
		}
	}
	require.Less(f, len(ops), 256, "an operation is picked by one byte")
	for i := range ops {
		f.Add(uint8(i), "1", "", []byte(`{}`), "", true)
		f.Add(uint8(i), "1", "", []byte(nil), "", false)
	}
	for _, seed := range operationSeeds {
		i := slices.Index(ops, seed.op)
		require.GreaterOrEqual(f, i, 0, "the document has no %s", seed.op)
		f.Add(uint8(i), seed.param, seed.query, []byte(seed.body), seed.header, seed.staff)
	}
	// The per-user rate limit would turn most inputs into 429s.
	s := systest.Start(f, systest.Options{Workers: 1, Overrides: []string{"RATE_LIMIT_PER_USER", "1000000"}})
	user := s.Client("fuzzer", domain.RoleUser) // made outside: f's helpers may not run in the target
	admin := s.Client("fuzz-admin", domain.RoleAdmin)
	f.Fuzz(func(t *testing.T, op uint8, param, query string, body []byte, header string, staff bool) {
		method, path, _ := strings.Cut(ops[int(op)%len(ops)], " ")
		if param == "" {
			param = "0"
		}
		path = pathParam.ReplaceAllLiteralString(path, url.PathEscape(param))
		if query != "" {
			path += "?" + query
		}
		c := user
		if staff {
			c = admin
		}
		var b any
		if len(body) > 0 {
			b = body
		}
		var headers []string
		if header != "" {
			headers = []string{"Idempotency-Key", header, "X-Entry-Token", header}
		}
		r, err := c.WithT(t).TryDo(method, path, b, headers...)
		if err != nil {
			unsent(t, err)
		}
		require.Less(t, r.Status, 500, "%s %s: %s", method, path, r.Body)
		if r.Status >= 400 {
			r.ErrorCode(t)
		}
	})
}
