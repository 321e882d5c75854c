// Package migrations holds the catalog's schema as numbered goose migrations,
// embedded into the binary. Landed files are never edited: a change is a new file.
package migrations

import "embed"

// FS holds every migration file (NNNNN_name.sql) at its root, and landed.sha256:
// the checksums of the landed ones, which a test holds them to.
//
//go:embed *.sql landed.sha256
var FS embed.FS
