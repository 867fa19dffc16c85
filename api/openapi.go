package api

import (
	_ "embed"
	"slices"

	"github.com/gofiber/fiber/v2"
)

// OpenAPIPath is where the API serves its OpenAPI document, unauthenticated.
const OpenAPIPath = "/openapi.yaml"

// openAPIDocument is the OpenAPI 3 description of every route New
// registers. The tests check both directions (every registered route is
// documented, every documented operation is registered) and validate every
// response of the end-to-end suite against it, so it cannot drift silently.
//
//go:embed openapi.yaml
var openAPIDocument []byte

// OpenAPIDocument returns a copy of the OpenAPI document (api/openapi.yaml).
func OpenAPIDocument() []byte { return slices.Clone(openAPIDocument) }

func serveOpenAPI(c *fiber.Ctx) error {
	c.Set(fiber.HeaderContentType, "application/yaml")
	return c.Send(openAPIDocument)
}

// Routes lists the routes the server registered: with filterUse, only the
// method routes (GET, POST, …, and the HEAD that Fiber adds beside every
// GET); without it, also the middleware and mounts added with Use. The
// OpenAPI route-coverage test compares them with the document.
func (s *Server) Routes(filterUse bool) []fiber.Route { return s.app.GetRoutes(filterUse) }
