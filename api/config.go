package api

import (
	"github.com/gofiber/fiber/v2"

	"github.com/holdfast/holdfast/config"
)

// Config returns the configuration the server was built with, for Mounts
// that need a setting (a rate limit, a TTL) when they add their routes.
func (s *Server) Config() config.Config { return s.cfg }

// Root is the app's root router, for a vertical's pages outside /api/v1
// (not authenticated: a page signs in with the token in its fragment).
func (s *Server) Root() fiber.Router { return s.app }
