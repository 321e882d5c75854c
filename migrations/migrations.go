// Package migrations holds the catalog's schema as numbered goose migrations,
// embedded into the binary. Landed files are never edited: a change is a new file.
package migrations

import "embed"

// FS holds every migration file (NNNNN_name.sql) at its root.
//
//go:embed *.sql
var FS embed.FS
