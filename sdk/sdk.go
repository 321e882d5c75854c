// Package sdk holds the Python and TypeScript function SDKs (python/cairn_fn,
// ts) as files a bundle carries, for tools that write bundles (`cairn init`): a
// Python handler imports the cairn_fn folder beside it, a TypeScript one
// node_modules/@cairnrun/fn. The Go SDK is the package fn; the conformance
// suite of all three is conformance/ (docs/functions.md, "SDKs").
package sdk

import (
	"embed"
	"io/fs"
)

//go:embed python/cairn_fn/*.py ts/package.json ts/index.mjs ts/index.d.ts
var files embed.FS

// Python returns the Python SDK as a tree holding cairn_fn/*.py: copy it beside
// a handler (os.CopyFS(dir, sdk.Python())).
func Python() fs.FS { return sub("python") }

// TypeScript returns the TypeScript SDK's package (package.json, index.mjs,
// index.d.ts): copy it to a bundle's node_modules/@cairnrun/fn.
func TypeScript() fs.FS { return sub("ts") }

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		panic(err) // dir is a constant of this package, embedded above
	}
	return f
}
