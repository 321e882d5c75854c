package api

import "fmt"

// SpecYAML renders the OpenAPI document the server serves, as committed in
// api/openapi.yaml. It needs no database or blob store.
func SpecYAML() ([]byte, error) {
	s := New(nil, nil, nil)
	b, err := s.API().OpenAPI().YAML()
	if err != nil {
		return nil, fmt.Errorf("render openapi: %w", err)
	}
	return b, nil
}
