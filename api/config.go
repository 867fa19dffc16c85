package api

import "github.com/holdfast/holdfast/config"

// Config returns the configuration the server was built with, for Mounts
// that need a setting (a rate limit, a TTL) when they add their routes.
func (s *Server) Config() config.Config { return s.cfg }
