package catalog

import "embed"

// SQLFiles holds catalog/sql: the current definition of every cairn_* function and
// every trigger of the schema, one file per concern, each under its comment. It is
// the reviewed text of the SQL program; the migrations that reach it are written by
// `go run ./migrations/gen NAME` (see catalog/sql/README.md), and
// TestSnapshotMatchesMigrations (package migrations) holds the two equal.
//
//go:embed sql/*.sql
var SQLFiles embed.FS
