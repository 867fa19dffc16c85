package api

import (
	"github.com/gofiber/fiber/v2"
)

// V1 is the authenticated /api/v1 group, where a vertical adds its routes
// (public routes go under /api/v1/public, which is not authenticated).
func (s *Server) V1() fiber.Router { return s.v1 }

// Root is the app's root router, for a vertical's pages outside /api/v1
// (not authenticated: a page signs in with the token in its fragment).
func (s *Server) Root() fiber.Router { return s.app }
