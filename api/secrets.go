package api

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/namespace"
	"github.com/cairnrun/cairn/secrets"
)

// Secret is a secret as the API shows it: its name and newest version, never a value.
type Secret struct {
	Name           string     `json:"name"`
	Version        int        `json:"version" doc:"the newest version, the one in use; versions count from 1"`
	CreatedAt      time.Time  `json:"created_at" doc:"when the newest version was set"`
	CreatedBy      string     `json:"created_by" doc:"the name of the token that set the newest version"`
	FirstCreatedAt *time.Time `json:"first_created_at,omitempty" doc:"when the first version was set (lists only)"`
}

// PutSecretBody is the body of PUT /v1/secrets/{name}.
type PutSecretBody struct {
	Value string `json:"value" minLength:"1" maxLength:"65536" doc:"the secret's value (UTF-8 text, at most 64 KiB): stored encrypted, never shown again"`
}

// SecretNameParam is the {name} path parameter of a secret.
type SecretNameParam struct {
	Name string `path:"name" pattern:"^[a-z0-9][a-z0-9_-]*$" maxLength:"63" doc:"secret name, like a step key"`
}

// Resolve qualifies Name in the request's namespace (api/namespace.go).
func (p *SecretNameParam) Resolve(ctx huma.Context) []error {
	p.Name = qualify(ctx.Context(), p.Name)
	return nil
}

func (s *Server) registerSecrets() {
	register(s, huma.Operation{
		OperationID:  "putSecret",
		Method:       http.MethodPut,
		Path:         "/v1/secrets/{name}",
		Summary:      "Set a secret",
		Description:  "Stores the value as the secret's next version (the first creates it), encrypted at rest with the server's key (CAIRN_SECRET_KEY; without one, 503 secret_key_missing). The newest version is the one in use (a webhook's signature check). No operation reads a value back.",
		Tags:         []string{"secrets"},
		MaxBodyBytes: secrets.MaxValueSize*6 + 1024, // JSON escapes (\u00XX) may take 6 bytes per byte of value
	}, RoleAdmin, []problemClass{classNoSecretKey}, func(ctx context.Context, in *struct {
		SecretNameParam
		Body PutSecretBody
	}) (*struct{ Body Secret }, error) {
		if len(in.Body.Value) > secrets.MaxValueSize {
			return nil, &validationError{errs: []error{&huma.ErrorDetail{Location: "body.value", Message: "at most 65536 bytes"}}}
		}
		v, err := s.vault.Put(ctx, in.Name, []byte(in.Body.Value), actor(ctx))
		if err != nil {
			return nil, err
		}
		return &struct{ Body Secret }{Body: Secret{Name: namespace.Strip(v.Name), Version: v.Version, CreatedAt: v.CreatedAt.UTC(), CreatedBy: v.CreatedBy}}, nil
	})

	register(s, huma.Operation{
		OperationID: "listSecrets",
		Method:      http.MethodGet,
		Path:        "/v1/secrets",
		Summary:     "List secrets",
		Description: "Secrets by name, each with its newest version and who set it when: never a value.",
		Tags:        []string{"secrets"},
	}, RoleAdmin, []problemClass{classInvalidCursor}, func(ctx context.Context, in *struct{ PageParams }) (*listOutput[Secret], error) {
		var after string
		if err := s.decodeCursor(in.Cursor, "secrets", "", &after); err != nil {
			return nil, err
		}
		rows, err := s.store.SecretList(ctx, &catalog.SecretListParams{After: after, Limit: in.Limit + 1, Namespace: requestNamespace(ctx)})
		if err != nil {
			return nil, err
		}
		out := &listOutput[Secret]{}
		out.Body.Items = make([]Secret, 0, len(rows))
		for i, r := range rows {
			if i == in.Limit {
				out.Body.NextCursor = s.encodeCursor("secrets", "", rows[i-1].Name)
				break
			}
			out.Body.Items = append(out.Body.Items, Secret{Name: namespace.Strip(r.Name), Version: r.Version, CreatedAt: r.CreatedAt.UTC(),
				CreatedBy: r.CreatedBy, FirstCreatedAt: utc(r.FirstCreatedAt)})
		}
		return out, nil
	})
}
