package client

// The generated client is made in two steps: gen writes the OpenAPI 3.0 form of the
// document the server serves (oapi-codegen does not read 3.1), then oapi-codegen,
// pinned in go.mod as a tool, writes client.gen.go. Run `go generate ./client` or
// `make client`; stale_test.go fails when the committed files are out of date.

//go:generate go run ./gen -o openapi-3.0.yaml
//go:generate go tool oapi-codegen -config oapi-codegen.yaml openapi-3.0.yaml
