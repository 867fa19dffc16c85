// Package migrations embeds holdfast's SQL migrations (goose format); both
// binaries apply them at start and `make migrate` applies them on demand.
package migrations

import "embed"

// FS holds the numbered migration files.
//
//go:embed *.sql
var FS embed.FS
