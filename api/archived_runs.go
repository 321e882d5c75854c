package api

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
)

// ArchivedRun is a run deleted by retention, read back from its archive: the run,
// its steps, attempts and events as GET showed them before the deletion.
type ArchivedRun struct {
	Run        Run       `json:"run"`
	Steps      []Step    `json:"steps"`
	Attempts   []Attempt `json:"attempts"`
	Events     []Event   `json:"events"`
	ArchivedAt time.Time `json:"archived_at" doc:"when retention archived and deleted the run"`
	BlobKey    string    `json:"blob_key" doc:"the archive in the blob store: JSON Lines of the run, its steps, attempts and events"`
}

func (s *Server) registerArchivedRuns() {
	register(s, huma.Operation{
		OperationID: "getArchivedRun",
		Method:      http.MethodGet,
		Path:        "/v1/archived-runs/{id}",
		Summary:     "Get an archived run",
		Description: "A run that retention deleted after archiving it (cairn.yaml retention: {archive: true}, or cairn serve --archive-runs): the run, its steps, attempts and events, read from its archive in the blob store. 404 for a run that is still in the catalog (GET /v1/runs/{id}) or was deleted without an archive.",
		Tags:        []string{"runs"},
	}, RoleViewer, []problemClass{classBadRequest, classNotFound}, func(ctx context.Context, in *RunIDParam) (*archivedRunOutput, error) {
		id, err := in.uuid()
		if err != nil {
			return nil, err
		}
		rec, err := s.store.ArchivedRunGet(ctx, id)
		if err != nil {
			return nil, err
		}
		rc, _, err := s.blobs.Get(ctx, rec.BlobKey, blobstore.GetOptions{})
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		a, err := catalog.ReadArchive(rc)
		if err != nil {
			return nil, err
		}
		out := &archivedRunOutput{}
		out.Body = ArchivedRun{Run: runOf(&a.Run), ArchivedAt: rec.ArchivedAt, BlobKey: rec.BlobKey,
			Steps: make([]Step, len(a.Steps)), Attempts: make([]Attempt, len(a.Attempts)), Events: make([]Event, len(a.Events))}
		for i := range a.Steps {
			out.Body.Steps[i] = stepOf(&a.Steps[i])
		}
		for i := range a.Attempts {
			out.Body.Attempts[i] = attemptOf(&a.Attempts[i])
		}
		for i := range a.Events {
			out.Body.Events[i] = eventOf(&a.Events[i])
		}
		return out, nil
	})
}

type archivedRunOutput struct {
	Body ArchivedRun
}
