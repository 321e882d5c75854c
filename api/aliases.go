package api

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/namespace"
)

// Alias is a named pointer of a workflow to one of its versions.
type Alias struct {
	Workflow  string        `json:"workflow" doc:"workflow name"`
	Alias     string        `json:"alias" doc:"alias name"`
	Version   int           `json:"version" doc:"the version the alias names"`
	UpdatedAt time.Time     `json:"updated_at" doc:"when the alias last changed"`
	UpdatedBy string        `json:"updated_by" doc:"who changed it last: the token's name (migration: made by the upgrade that introduced aliases)"`
	History   []AliasChange `json:"history,omitempty" doc:"its most recent changes, newest first; only on a single alias"`
}

// AliasChange is an entry of an alias's history.
type AliasChange struct {
	Version         int       `json:"version" doc:"the version the alias named after the change"`
	PreviousVersion *int      `json:"previous_version" doc:"the version it named before; null when the change created the alias"`
	Kind            string    `json:"kind" enum:"deploy,promote,rollback" doc:"deploy: a deploy moved latest; promote: PUT …/aliases/{alias}; rollback: POST …/aliases/{alias}/rollback"`
	Actor           string    `json:"actor" doc:"who made the change: the token's name"`
	CreatedAt       time.Time `json:"created_at"`
}

// SetAliasBody is the body of PUT /v1/workflows/{name}/aliases/{alias}.
type SetAliasBody struct {
	Version int `json:"version" minimum:"1" maximum:"2147483647" doc:"the version the alias is to name"`
}

type aliasOutput struct{ Body Alias }

// AliasParams are the {name} and {alias} path parameters.
type AliasParams struct {
	WorkflowNameParam
	Alias string `path:"alias" pattern:"^[a-z][a-z0-9-]*$" maxLength:"63" doc:"alias name: lower case, starting with a letter (latest, stable, canary, …)"`
}

// aliasHistoryLimit is how many changes GET, PUT and rollback of an alias show.
const aliasHistoryLimit = 20

func aliasOf(a *catalog.Alias) Alias {
	return Alias{Workflow: namespace.Strip(a.Workflow), Alias: a.Alias, Version: a.Version, UpdatedAt: a.UpdatedAt.UTC(), UpdatedBy: a.UpdatedBy}
}

// aliasWithHistory reads an alias and its recent history.
func (s *Server) aliasWithHistory(ctx context.Context, workflow, alias string) (*aliasOutput, error) {
	a, err := s.store.AliasGet(ctx, workflow, alias)
	if err != nil {
		if errors.Is(err, catalog.ErrNotFound) {
			return nil, s.aliasNotFound(ctx, err, workflow, alias)
		}
		return nil, err
	}
	changes, err := s.store.AliasHistory(ctx, workflow, alias, aliasHistoryLimit)
	if err != nil {
		return nil, err
	}
	out := &aliasOutput{Body: aliasOf(a)}
	out.Body.History = make([]AliasChange, len(changes))
	for i, c := range changes {
		out.Body.History[i] = AliasChange{Version: c.Version, PreviousVersion: c.PreviousVersion, Kind: string(c.Kind),
			Actor: c.Actor, CreatedAt: c.CreatedAt.UTC()}
	}
	return out, nil
}

// aliasNotFound says which of the workflow and its alias does not exist.
func (s *Server) aliasNotFound(ctx context.Context, err error, workflow, alias string) error {
	if _, werr := s.store.WorkflowGet(ctx, workflow); errors.Is(werr, catalog.ErrNotFound) {
		return withDetail(err, "no workflow %q: deploy a bundle first", workflow)
	}
	return withDetail(err, "workflow %q has no alias %q", workflow, alias)
}

func (s *Server) registerAliases() {
	register(s, huma.Operation{
		OperationID: "listAliases",
		Method:      http.MethodGet,
		Path:        "/v1/workflows/{name}/aliases",
		Summary:     "List a workflow's aliases",
		Description: "Aliases ordered by name, keyset-paginated.",
		Tags:        []string{"workflows"},
	}, RoleViewer, []problemClass{classInvalidCursor, classNotFound}, func(ctx context.Context, in *struct {
		WorkflowNameParam
		PageParams
	}) (*listOutput[Alias], error) {
		var after string
		if err := s.decodeCursor(in.Cursor, "aliases", in.Name, &after); err != nil {
			return nil, err
		}
		if _, err := s.store.WorkflowGet(ctx, in.Name); err != nil {
			return nil, err
		}
		rows, err := s.store.AliasList(ctx, &catalog.AliasListParams{Workflow: in.Name, After: after, Limit: in.Limit + 1})
		if err != nil {
			return nil, err
		}
		out := &listOutput[Alias]{}
		out.Body.Items = make([]Alias, 0, len(rows))
		for i := range rows {
			if i == in.Limit {
				out.Body.NextCursor = s.encodeCursor("aliases", in.Name, rows[i-1].Alias)
				break
			}
			out.Body.Items = append(out.Body.Items, aliasOf(&rows[i]))
		}
		return out, nil
	})

	register(s, huma.Operation{
		OperationID: "getAlias",
		Method:      http.MethodGet,
		Path:        "/v1/workflows/{name}/aliases/{alias}",
		Summary:     "Get an alias with its recent history",
		Description: "The version the alias names and its last 20 changes, newest first, each with its actor.",
		Tags:        []string{"workflows"},
	}, RoleViewer, []problemClass{classNotFound}, func(ctx context.Context, in *AliasParams) (*aliasOutput, error) {
		return s.aliasWithHistory(ctx, in.Name, in.Alias)
	})

	register(s, huma.Operation{
		OperationID: "setAlias",
		Method:      http.MethodPut,
		Path:        "/v1/workflows/{name}/aliases/{alias}",
		Summary:     "Point an alias at a version (promote)",
		Description: "Creates the alias or moves it to the version, and records the change with the token's name. Runs started on the alias from then on get that version; runs already created keep theirs. An alias that names the version already is left as it is. A version the workflow does not have is a 422 naming body.version.",
		Tags:        []string{"workflows"},
	}, RoleOperator, []problemClass{classNotFound}, func(ctx context.Context, in *struct {
		AliasParams
		Body SetAliasBody
	}) (*aliasOutput, error) {
		_, err := s.store.AliasSet(ctx, &catalog.AliasSetParams{Workflow: in.Name, Alias: in.Alias, Version: in.Body.Version,
			Kind: catalog.AliasPromote, Actor: actor(ctx)})
		switch {
		case errors.Is(err, catalog.ErrNotFound):
			return nil, withDetail(err, "no workflow %q: deploy a bundle first", in.Name)
		case errors.Is(err, catalog.ErrInvalidInput):
			return nil, &validationError{errs: []error{&huma.ErrorDetail{Location: "body.version",
				Message: cmp.Or(catalog.Reason(err), "no such version"), Value: in.Body.Version}}}
		case err != nil:
			return nil, err
		}
		return s.aliasWithHistory(ctx, in.Name, in.Alias)
	})

	register(s, huma.Operation{
		OperationID: "rollbackAlias",
		Method:      http.MethodPost,
		Path:        "/v1/workflows/{name}/aliases/{alias}/rollback",
		Summary:     "Move an alias back to its previous version",
		Description: "Moves the alias back to the version it named before its current one, and records the change with the token's name. Repeated rollbacks walk further back through the alias's history (a version rolled away from is not returned to). Runs already created keep their version. An alias with no earlier version is a 409 nothing_to_roll_back.",
		Tags:        []string{"workflows"},
	}, RoleOperator, []problemClass{classNotFound, classNothingToRollBack}, func(ctx context.Context, in *AliasParams) (*aliasOutput, error) {
		_, err := s.store.AliasRollback(ctx, in.Name, in.Alias, actor(ctx))
		switch {
		case errors.Is(err, catalog.ErrNotFound):
			return nil, s.aliasNotFound(ctx, err, in.Name, in.Alias)
		case err != nil:
			return nil, err
		}
		return s.aliasWithHistory(ctx, in.Name, in.Alias)
	})
}
