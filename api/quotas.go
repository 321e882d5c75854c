package api

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/namespace"
)

// Quotas per namespace (docs/flow.md, "Quotas"; catalog/quota.go): GET and PUT
// /v1/namespaces/{namespace}/quotas.

// NamespaceQuotas are a namespace's quotas and their use now.
type NamespaceQuotas struct {
	Namespace      string    `json:"namespace"`
	RunningSteps   *int      `json:"running_steps" doc:"the most steps of the namespace's runs running at once, on every server; null: none"`
	RunsPerMinute  *int      `json:"runs_per_minute" doc:"the most runs the namespace's workflows start in any minute (starts, reruns, hooks, schedules, triggers, child runs); null: none"`
	Running        int       `json:"running" doc:"the namespace's steps running now"`
	RunsLastMinute int       `json:"runs_last_minute" doc:"the runs the namespace created in the last minute"`
	UpdatedAt      time.Time `json:"updated_at"`
	UpdatedBy      string    `json:"updated_by" doc:"the name of the token that last changed the namespace"`
}

// QuotaValue is a quota in the body of PUT …/quotas: absent keeps it, null clears
// it, a number sets it.
type QuotaValue struct {
	Set   bool
	Limit *int
}

// UnmarshalJSON implements json.Unmarshaler: a field present (null or not) is a
// change.
func (v *QuotaValue) UnmarshalJSON(b []byte) error {
	v.Set = true
	return json.Unmarshal(b, &v.Limit)
}

// Schema implements huma.SchemaProvider: an integer or null.
func (QuotaValue) Schema(huma.Registry) *huma.Schema {
	lo, hi := 1.0, float64(catalog.MaxQuota)
	return &huma.Schema{Type: "integer", Nullable: true, Minimum: &lo, Maximum: &hi}
}

func (v QuotaValue) change() catalog.QuotaChange {
	c := catalog.QuotaChange{Change: v.Set}
	if v.Limit != nil {
		c.Limit = *v.Limit
	}
	return c
}

// PutQuotasBody is the body of PUT /v1/namespaces/{namespace}/quotas.
type PutQuotasBody struct {
	RunningSteps  QuotaValue `json:"running_steps,omitempty" doc:"the most steps running at once; null clears it; absent keeps it"`
	RunsPerMinute QuotaValue `json:"runs_per_minute,omitempty" doc:"the most runs started in any minute; null clears it; absent keeps it"`
}

// NamespaceParam is the {namespace} path parameter.
type NamespaceParam struct {
	Namespace string `path:"namespace" pattern:"^[a-z0-9][a-z0-9-]*$" maxLength:"31" doc:"the namespace's name"`
}

func quotasOf(q *catalog.NamespaceQuotas) NamespaceQuotas {
	return NamespaceQuotas{Namespace: q.Namespace, RunningSteps: q.RunningSteps, RunsPerMinute: q.RunsPerMinute,
		Running: q.Running, RunsLastMinute: q.RunsLastMinute, UpdatedAt: q.UpdatedAt.UTC(), UpdatedBy: q.UpdatedBy}
}

func (s *Server) registerQuotas() {
	register(s, huma.Operation{
		OperationID: "getNamespaceQuotas",
		Method:      http.MethodGet,
		Path:        "/v1/namespaces/{namespace}/quotas",
		Summary:     "Show a namespace's quotas",
		Description: "The namespace's running_steps and runs_per_minute quotas (null: none) and their use now: its steps running, its runs created in the last minute. A token scoped to a namespace sees its own only.",
		Tags:        []string{"namespaces"},
	}, RoleViewer, []problemClass{classNotFound}, func(ctx context.Context, in *NamespaceParam) (*struct{ Body NamespaceQuotas }, error) {
		if scoped := identity(ctx).Namespace; scoped != "" && scoped != in.Namespace {
			return nil, withDetail(errNotFound, "no namespace %q", in.Namespace) // as if there were none
		}
		q, err := s.store.QuotaGet(ctx, in.Namespace)
		if err != nil {
			return nil, withDetail(err, "no namespace %q", in.Namespace)
		}
		return &struct{ Body NamespaceQuotas }{Body: quotasOf(q)}, nil
	})

	register(s, everyNamespace(huma.Operation{
		OperationID: "putNamespaceQuotas",
		Method:      http.MethodPut,
		Path:        "/v1/namespaces/{namespace}/quotas",
		Summary:     "Change a namespace's quotas",
		Description: "Sets (a number) or clears (null) the namespace's quotas; a field left out keeps its quota. `running_steps` bounds the steps of the namespace's runs running at once on every server: a step over it stays ready (blocked_by kind quota) until a running one ends; lowered below the steps running, it lets them finish and holds back the next. `runs_per_minute` bounds the runs created in any minute: a start, rerun or hook delivery over it is a 429 quota_exceeded with Retry-After; a schedule's fire is skipped, an event's triggered run is not started, a child run's step fails with code quota_exceeded and is retried by its policy (docs/flow.md, \"Quotas\"). The default namespace takes no quota. Audited.",
		Tags:        []string{"namespaces"},
	}), RoleAdmin, []problemClass{classNotFound, classValidationFailed}, func(ctx context.Context, in *struct {
		NamespaceParam
		Body PutQuotasBody
	}) (*struct{ Body NamespaceQuotas }, error) {
		p := catalog.QuotaSetParams{RunningSteps: in.Body.RunningSteps.change(), RunsPerMinute: in.Body.RunsPerMinute.change()}
		switch {
		case !p.RunningSteps.Change && !p.RunsPerMinute.Change:
			return nil, auditFailure(ctx, classValidationFailed.problem("nothing to change",
				&huma.ErrorDetail{Location: "body", Message: "give running_steps, runs_per_minute, or both (null clears one)"}))
		case in.Namespace == namespace.Default && (p.RunningSteps.Limit > 0 || p.RunsPerMinute.Limit > 0):
			return nil, auditFailure(ctx, classValidationFailed.problem("the default namespace takes no quota",
				&huma.ErrorDetail{Location: "path.namespace", Value: in.Namespace,
					Message: "the default namespace takes no quota: bound its workflows with concurrency limits (PUT /v1/limits/{name})"}))
		}
		q, err := s.store.QuotaSet(ctx, in.Namespace, p, actor(ctx))
		if err != nil {
			return nil, withDetail(err, "no namespace %q", in.Namespace)
		}
		return &struct{ Body NamespaceQuotas }{Body: quotasOf(q)}, nil
	})
}
