// Package cairn is the root of Cairn's module. It holds the source of the Go
// function SDK (package fn) with the module's go.mod and go.sum, for `cairn
// init --lang go`, which copies the SDK into a new project (cmd/cairn/init.go),
// so that the project builds with no other copy of this module.
package cairn

import "embed"

// GoSDK holds go.mod, go.sum and fn/*.go (the package's tests too).
//
//go:embed go.mod go.sum fn/*.go
var GoSDK embed.FS
