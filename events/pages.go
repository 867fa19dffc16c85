package events

import (
	"embed"
	"net/http"
	"path"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/holdfast/holdfast/api"
)

// pageFiles are the waiting-room page and the seat page (SPEC §6.2): HTML,
// CSS and plain JavaScript in the binary, with no build step and nothing
// loaded from other hosts.
//
//go:embed pages
var pageFiles embed.FS

// pageCSP lets a page load only its own scripts and styles and call only
// its own API: no inline code, no other hosts, no framing. Images alone
// may come from another host, over https: an event's imageUrl is its
// operator's choice (issue 49).
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data: https:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Pages adds the events' pages at the API's root: GET
// /events/{eventId}/waiting-room and /events/{eventId}/seats-page, and
// their scripts and styles under /events/assets/. A page is the same for
// every user and event (it reads both from its address and the sign-in
// from its fragment), so a CDN may cache it: for a minute, the assets for
// an hour. Nothing personal passes through them; the API's own answers are
// never cached.
func Pages(root fiber.Router) {
	page := func(name string) fiber.Handler {
		b, err := pageFiles.ReadFile("pages/" + name)
		if err != nil {
			panic(err) // embedded at build time
		}
		return func(c *fiber.Ctx) error {
			if _, err := api.PathID(c, "eventId"); err != nil {
				return err
			}
			secure(c, "public, max-age=60")
			c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
			return c.Send(b)
		}
	}
	root.Get("/events/:eventId/waiting-room", page("waiting-room.html"))
	root.Get("/events/:eventId/seats-page", page("seats.html"))
	root.Get("/events/assets/:name", func(c *fiber.Ctx) error {
		name := c.Params("name")
		typ, ok := assetTypes[path.Ext(name)]
		if !ok || strings.ContainsAny(name, "/\\") {
			return fiber.ErrNotFound
		}
		b, err := pageFiles.ReadFile("pages/" + name)
		if err != nil {
			return fiber.ErrNotFound
		}
		secure(c, "public, max-age=3600")
		c.Set(fiber.HeaderContentType, typ)
		return c.Status(http.StatusOK).Send(b)
	})
}

// assetTypes are the content types of the pages' assets, by extension.
var assetTypes = map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}

// secure sets the headers every page and asset carries.
func secure(c *fiber.Ctx, cache string) {
	c.Set(fiber.HeaderCacheControl, cache)
	c.Set(fiber.HeaderContentSecurityPolicy, pageCSP)
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderReferrerPolicy, "no-referrer")
	c.Set(fiber.HeaderXFrameOptions, "DENY")
}
