// Command gen writes the OpenAPI 3.0 form of Cairn's API document, which
// oapi-codegen reads (it does not read 3.1). Huma downgrades the document the
// server serves, so the client is generated from exactly what the code serves.
//
// Usage (from client/, through go generate):
//
//	go run ./gen -o openapi-3.0.yaml
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/namespace"
)

func main() {
	out := flag.String("o", "openapi-3.0.yaml", "file to write the OpenAPI 3.0 document to")
	flag.Parse()
	if err := write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func write(path string) error {
	doc := api.New(nil, nil, nil).API().OpenAPI()
	// The Cairn-Namespace header of every operation is the client's, not each
	// call's: client.WithNamespace sends it. Left in, it would add a parameter to
	// every generated method.
	for _, item := range doc.Paths {
		for _, op := range []*huma.Operation{item.Get, item.Put, item.Post, item.Delete, item.Patch} {
			if op != nil {
				op.Parameters = slices.DeleteFunc(op.Parameters, func(p *huma.Param) bool { return p.Name == namespace.Header })
			}
		}
	}
	b, err := doc.DowngradeYAML()
	if err != nil {
		return fmt.Errorf("downgrade openapi: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
