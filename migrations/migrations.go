// Package migrations holds the catalog's schema as numbered goose migrations,
// embedded into the binary. Landed files are never edited: a change is a new file.
//
// The current definition of every cairn_* function and trigger is catalog/sql, not
// the migration that last wrote it: a change to one is an edit there, and its
// migration is written by `go run ./migrations/gen NAME` (package gen; Up: the
// changed definitions, Down: the previous ones). TestSnapshotMatchesMigrations
// holds catalog/sql and the migrations equal.
package migrations

import "embed"

// FS holds every migration file (NNNNN_name.sql) at its root, and landed.sha256:
// the checksums of the landed ones, which a test holds them to.
//
//go:embed *.sql landed.sha256
var FS embed.FS
