package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/namespace"
)

// Workflow is a named workflow.
type Workflow struct {
	Name          string         `json:"name" doc:"workflow name"`
	Description   string         `json:"description" doc:"description from the newest version's manifest"`
	LatestVersion int            `json:"latest_version" doc:"the version the alias latest names: what a run started without a version or alias gets (deploy moves it unless ?promote=false); 0 when latest names none"`
	Aliases       map[string]int `json:"aliases" doc:"every alias of the workflow and the version it names, such as {\"latest\": 3, \"stable\": 2}"`
	CreatedAt     time.Time      `json:"created_at" doc:"when version 1 was uploaded"`
	UpdatedAt     time.Time      `json:"updated_at" doc:"when the newest version was uploaded"`
	Paused        bool           `json:"paused" doc:"true while the workflow is paused (POST …/pause): its new runs are created paused"`
	PausedBy      *string        `json:"paused_by" doc:"the name of the token that paused it; null unless paused"`
	PausedAt      *time.Time     `json:"paused_at" doc:"when it was paused; null unless paused"`
}

// Version is an immutable version of a workflow.
type Version struct {
	Workflow    string          `json:"workflow" doc:"workflow name"`
	Version     int             `json:"version" doc:"version number, from 1"`
	Digest      string          `json:"digest" doc:"bundle digest, sha256:<hex> of the canonical tree"`
	Size        int64           `json:"size" doc:"size of the canonical bundle archive in bytes"`
	Fingerprint string          `json:"fingerprint" doc:"sha256 of the normalized definition"`
	CreatedAt   time.Time       `json:"created_at" doc:"upload time"`
	Definition  json.RawMessage `json:"definition,omitempty" doc:"normalized definition (defaults filled in); only on a single version"`
}

func workflowOf(w *catalog.Workflow) Workflow {
	aliases := map[string]int(w.Aliases)
	if aliases == nil {
		aliases = map[string]int{}
	}
	return Workflow{Name: namespace.Strip(w.Name), Description: w.Description, LatestVersion: w.LatestVersion, Aliases: aliases,
		CreatedAt: w.CreatedAt.UTC(), UpdatedAt: w.UpdatedAt.UTC(),
		Paused: w.Paused, PausedBy: w.PausedBy, PausedAt: utc(w.PausedAt)}
}

func versionOf(v *catalog.Version, withDefinition bool) Version {
	out := Version{Workflow: namespace.Strip(v.Workflow), Version: v.Version, Digest: v.BundleDigest, Size: v.BundleSize,
		Fingerprint: v.Fingerprint, CreatedAt: v.CreatedAt.UTC()}
	if withDefinition {
		out.Definition = redactDefinition(stripDefinition(v.Workflow, json.RawMessage(v.Definition)))
	}
	return out
}

// stripDefinition is def, the definition of workflow (a catalog key), with the
// names its namespace qualified stripped (bundle.Definition.Qualify): as the user
// wrote them. A definition of the default namespace is returned as it is.
func stripDefinition(workflow string, def json.RawMessage) json.RawMessage {
	if namespace.Of(workflow) == namespace.Default {
		return def
	}
	var d bundle.Definition
	if err := json.Unmarshal(def, &d); err != nil {
		return nil // a stored definition always decodes; never show what did not
	}
	d.Strip()
	out, err := d.CanonicalJSON()
	if err != nil {
		return nil
	}
	return out
}

// redacted stands for a value the API never shows.
const redacted = "[redacted]"

// redactDefinition hides the plain values of http steps' headers and exec steps'
// env, the manifest's places for a function's credentials: viewers see
// that a header or variable is set, not to what. Secret references ({"secret":
// name}) stay: they hold a name, never a value. Compensations count as steps.
func redactDefinition(def json.RawMessage) json.RawMessage {
	if !bytes.Contains(def, []byte(`"headers"`)) && !bytes.Contains(def, []byte(`"env"`)) {
		return def
	}
	var d map[string]any
	if err := json.Unmarshal(def, &d); err != nil {
		return nil // a stored definition always decodes; never show what did not
	}
	redactValues := func(m map[string]any) {
		for k, v := range m {
			if _, ref := v.(map[string]any); !ref {
				m[k] = redacted
			}
		}
	}
	var redactStep func(step map[string]any)
	redactStep = func(step map[string]any) {
		h, _ := step["http"].(map[string]any)
		headers, _ := h["headers"].(map[string]any)
		redactValues(headers)
		env, _ := step["env"].(map[string]any)
		redactValues(env)
		if c, ok := step["compensate"].(map[string]any); ok {
			redactStep(c)
		}
	}
	for _, list := range []string{"steps", "on_failure"} {
		steps, _ := d[list].([]any)
		for _, st := range steps {
			step, _ := st.(map[string]any)
			redactStep(step)
		}
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil
	}
	return b
}

// PageParams are the query parameters of every list.
type PageParams struct {
	Cursor string `query:"cursor" maxLength:"512" doc:"next_cursor of the previous page"`
	Limit  int    `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"page size"`
}

// List is a page of items.
type List[T any] struct {
	Items      []T    `json:"items" doc:"this page"`
	NextCursor string `json:"next_cursor,omitempty" doc:"cursor of the next page; absent on the last page"`
}

type listOutput[T any] struct {
	Body List[T]
}

type workflowOutput struct{ Body Workflow }
type versionOutput struct{ Body Version }

// WorkflowNameParam is the {name} path parameter. Once validated, Name is the
// catalog's key of the workflow in the request's namespace (Resolve).
type WorkflowNameParam struct {
	Name string `path:"name" pattern:"^[a-z0-9][a-z0-9-]*$" maxLength:"63" doc:"workflow name"`
}

// Resolve qualifies Name in the request's namespace (api/namespace.go). Huma calls
// it after the parameter's validation.
func (p *WorkflowNameParam) Resolve(ctx huma.Context) []error {
	p.Name = qualify(ctx.Context(), p.Name)
	return nil
}

func (s *Server) registerWorkflows() {
	register(s, huma.Operation{
		OperationID: "listWorkflows",
		Method:      http.MethodGet,
		Path:        "/v1/workflows",
		Summary:     "List workflows",
		Description: "Workflows ordered by name, keyset-paginated.",
		Tags:        []string{"workflows"},
	}, RoleViewer, []problemClass{classInvalidCursor}, func(ctx context.Context, in *struct{ PageParams }) (*listOutput[Workflow], error) {
		var after string
		if err := s.decodeCursor(in.Cursor, "workflows", "", &after); err != nil {
			return nil, err
		}
		rows, err := s.store.WorkflowList(ctx, &catalog.WorkflowListParams{After: after, Limit: in.Limit + 1, Namespace: requestNamespace(ctx)})
		if err != nil {
			return nil, err
		}
		out := &listOutput[Workflow]{}
		out.Body.Items = make([]Workflow, 0, len(rows))
		for i := range rows {
			if i == in.Limit {
				out.Body.NextCursor = s.encodeCursor("workflows", "", rows[i-1].Name)
				break
			}
			out.Body.Items = append(out.Body.Items, workflowOf(&rows[i]))
		}
		return out, nil
	})

	register(s, huma.Operation{
		OperationID: "getWorkflow",
		Method:      http.MethodGet,
		Path:        "/v1/workflows/{name}",
		Summary:     "Get a workflow",
		Tags:        []string{"workflows"},
	}, RoleViewer, []problemClass{classNotFound}, func(ctx context.Context, in *WorkflowNameParam) (*workflowOutput, error) {
		w, err := s.store.WorkflowGet(ctx, in.Name)
		if err != nil {
			return nil, err
		}
		return &workflowOutput{Body: workflowOf(w)}, nil
	})

	register(s, huma.Operation{
		OperationID: "listVersions",
		Method:      http.MethodGet,
		Path:        "/v1/workflows/{name}/versions",
		Summary:     "List a workflow's versions",
		Description: "Versions newest first, keyset-paginated.",
		Tags:        []string{"workflows"},
	}, RoleViewer, []problemClass{classInvalidCursor, classNotFound}, func(ctx context.Context, in *struct {
		WorkflowNameParam
		PageParams
	}) (*listOutput[Version], error) {
		var before int
		if err := s.decodeCursor(in.Cursor, "versions", in.Name, &before); err != nil {
			return nil, err
		}
		if _, err := s.store.WorkflowGet(ctx, in.Name); err != nil {
			return nil, err
		}
		rows, err := s.store.VersionList(ctx, &catalog.VersionListParams{Workflow: in.Name, Before: before, Limit: in.Limit + 1})
		if err != nil {
			return nil, err
		}
		out := &listOutput[Version]{}
		out.Body.Items = make([]Version, 0, len(rows))
		for i := range rows {
			if i == in.Limit {
				out.Body.NextCursor = s.encodeCursor("versions", in.Name, rows[i-1].Version)
				break
			}
			out.Body.Items = append(out.Body.Items, versionOf(&rows[i], false))
		}
		return out, nil
	})

	register(s, huma.Operation{
		OperationID: "getVersion",
		Method:      http.MethodGet,
		Path:        "/v1/workflows/{name}/versions/{version}",
		Summary:     "Get a version with its normalized definition",
		Tags:        []string{"workflows"},
	}, RoleViewer, []problemClass{classNotFound}, func(ctx context.Context, in *struct {
		WorkflowNameParam
		Version int `path:"version" minimum:"1" maximum:"2147483647" doc:"version number"`
	}) (*versionOutput, error) {
		v, err := s.store.VersionGet(ctx, in.Name, in.Version)
		if err != nil {
			return nil, err
		}
		return &versionOutput{Body: versionOf(v, true)}, nil
	})
}
