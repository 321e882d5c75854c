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

	"github.com/cairnrun/cairn/api"
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
	b, err := api.New(nil, nil, nil).API().OpenAPI().DowngradeYAML()
	if err != nil {
		return fmt.Errorf("downgrade openapi: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
