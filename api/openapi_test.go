package api_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/holdfast/holdfast/api"
	"github.com/holdfast/holdfast/cmd/wiring"
	"github.com/holdfast/holdfast/config"
	"github.com/holdfast/holdfast/internal/apispec"
	"github.com/holdfast/holdfast/metrics"
)

// fullServer builds the API with every mount the binaries use (the probe
// included, as HOLDFAST_PROBE=true and the tests enable it) and Asynqmon.
// Building the routes opens no connection, so no database is needed.
func fullServer(t *testing.T) *api.Server {
	mon := asynqmon.New(asynqmon.Options{RootPath: "/monitoring", RedisConnOpt: asynq.RedisClientOpt{Addr: "127.0.0.1:6379"}})
	t.Cleanup(func() { _ = mon.Close() })
	cfg := config.Config{EnableProbe: true}
	reg := prometheus.NewRegistry()
	return api.New(cfg, api.Deps{Registry: reg, Metrics: metrics.NewPipeline(reg), Monitoring: mon}, wiring.Verticals(cfg))
}

var fiberParam = regexp.MustCompile(`:([A-Za-z0-9_]+)`)

// openAPIPath turns Fiber's /a/:id into OpenAPI's /a/{id}.
func openAPIPath(fiberPath string) string { return fiberParam.ReplaceAllString(fiberPath, "{$1}") }

// registeredOperations lists the server's method routes as "METHOD /path/{param}".
// Fiber registers a HEAD beside every GET; HEAD is implied by GET in HTTP
// and in OpenAPI, so it is left out when its GET is there (and kept, to be
// reported, when it is not).
func registeredOperations(t *testing.T, routes []fiber.Route) []string {
	gets := map[string]bool{}
	for _, r := range routes {
		if r.Method == fiber.MethodGet {
			gets[r.Path] = true
		}
	}
	var ops []string
	for _, r := range routes {
		require.NotContains(t, r.Path, "*", "wildcard route %s %s cannot be documented as one path", r.Method, r.Path)
		require.NotContains(t, r.Path, "?", "optional parameter in %s %s cannot be documented as one path", r.Method, r.Path)
		if r.Method == fiber.MethodHead && gets[r.Path] {
			continue
		}
		ops = append(ops, r.Method+" "+openAPIPath(r.Path))
	}
	slices.Sort(ops)
	return slices.Compact(ops)
}

// missing lists the operations of want that have lacks.
func missing(want, have []string) []string {
	var out []string
	for _, op := range want {
		if !slices.Contains(have, op) {
			out = append(out, op)
		}
	}
	return out
}

// TestOpenAPIRouteCoverage: every route the API registers is in the OpenAPI
// document and every documented operation is registered.
func TestOpenAPIRouteCoverage(t *testing.T) {
	doc, err := apispec.Load()
	require.NoError(t, err)
	registered := registeredOperations(t, fullServer(t).Routes(true))
	documented := doc.Operations()
	require.NotEmpty(t, registered)
	require.Empty(t, missing(registered, documented), "routes the API registers that api/openapi.yaml lacks")
	require.Empty(t, missing(documented, registered), "operations api/openapi.yaml documents that the API does not register")
}

// TestOpenAPIMountsAreAccountedFor: what the API adds with Use (middleware
// and mounted handlers, which GetRoutes(true) hides) is either middleware
// in front of documented routes or a prefix of the explicit exclusion list
// apispec.Undocumented, and that list names only prefixes the API mounts and
// the document does not describe.
func TestOpenAPIMountsAreAccountedFor(t *testing.T) {
	doc, err := apispec.Load()
	require.NoError(t, err)
	srv := fullServer(t)
	methodRoutes := map[string]bool{}
	for _, r := range srv.Routes(true) {
		methodRoutes[r.Method+" "+r.Path] = true
	}
	mounted := map[string]bool{}
	for _, r := range srv.Routes(false) {
		if !methodRoutes[r.Method+" "+r.Path] {
			mounted[r.Path] = true
		}
	}
	// "/" carries the global middleware (recover, trace id, access log) and
	// the catch-all 404; "/api/v1" the authentication of the v1 group.
	middleware := []string{"/", "/api/v1"}
	for path := range mounted {
		if slices.Contains(middleware, path) {
			continue
		}
		_, excluded := apispec.Undocumented[path]
		require.True(t, excluded, "%s is mounted with Use but neither documented nor in apispec.Undocumented", path)
	}
	for prefix := range apispec.Undocumented {
		require.True(t, mounted[prefix], "apispec.Undocumented lists %s, which the API does not mount", prefix)
		for _, op := range doc.Operations() {
			_, path, _ := strings.Cut(op, " ")
			require.False(t, apispec.IsUndocumented(path), "%s is documented but lies under the excluded %s", op, prefix)
		}
	}
}

// TestOpenAPIRouteCoverageCanFail is the control case: a route the document
// lacks, and a documented operation the API lacks, are both reported.
func TestOpenAPIRouteCoverageCanFail(t *testing.T) {
	doc, err := apispec.Load()
	require.NoError(t, err)
	routes := fullServer(t).Routes(true)

	extra := append(slices.Clone(routes), fiber.Route{Method: fiber.MethodPost, Path: "/api/v1/hotels/:hotelId/undocumented"})
	require.Equal(t, []string{"POST /api/v1/hotels/{hotelId}/undocumented"},
		missing(registeredOperations(t, extra), doc.Operations()))

	withoutHealth := slices.DeleteFunc(slices.Clone(routes), func(r fiber.Route) bool { return r.Path == "/healthz" })
	require.Equal(t, []string{"GET /healthz"}, missing(doc.Operations(), registeredOperations(t, withoutHealth)))
}
