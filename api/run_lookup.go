package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/catalog"
)

// runLookupMax is the most runs GET /v1/runs:lookup answers.
const runLookupMax = 5

func (s *Server) registerRunLookup() {
	register(s, huma.Operation{
		OperationID: "lookupRuns",
		Method:      http.MethodGet,
		Path:        "/v1/runs:lookup",
		Summary:     "Find runs by a short ID",
		Description: "The runs (at most 5, newest first) whose ID the id parameter names: the whole ID, its last 12 hex digits (the short ID the web UI shows), or its first 8 to 31 hex digits. One item: the ID is unique; none: no run has it; several: it is ambiguous (give more of it).",
		Tags:        []string{"runs"},
	}, RoleViewer, []problemClass{classBadRequest}, func(ctx context.Context, in *struct {
		ID string `query:"id" required:"true" minLength:"1" maxLength:"36" doc:"a run ID, whole or short"`
	}) (*itemsOutput[Run], error) {
		ids, err := s.store.RunLookup(ctx, in.ID, runLookupMax, requestNamespace(ctx))
		if err != nil {
			return nil, err
		}
		runs := make([]catalog.Run, 0, len(ids))
		for _, id := range ids {
			r, err := s.store.RunGet(ctx, id)
			if err != nil {
				continue // deleted since: not a match any more
			}
			runs = append(runs, *r)
		}
		return itemsOf(runs, runOf), nil
	})
}
