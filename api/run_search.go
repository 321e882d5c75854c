package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/cairnrun/cairn/catalog"
)

// RunFilterParams are the filters of GET /v1/runs (query parameters) and of a bulk
// operation (POST /v1/runs:bulk, its JSON filter): one shape for both. Every one
// given must match. Which index serves each is said beside runFilter (catalog).
type RunFilterParams struct {
	Workflow      string    `query:"workflow" json:"workflow,omitempty" pattern:"^[a-z0-9][a-z0-9-]*$" maxLength:"63" doc:"only runs of this workflow"`
	Status        string    `query:"status" json:"status,omitempty" enum:"pending,running,paused,compensating,succeeded,failed,canceled" doc:"only runs in this state"`
	Labels        []string  `query:"label,explode" json:"label,omitempty" maxItems:"32" doc:"only runs carrying this label, given as key=value (split at the first '='); repeat for more, all must match"`
	Version       int       `query:"version" json:"version,omitempty" minimum:"0" maximum:"2147483647" doc:"only runs of this version of the workflow (needs workflow)"`
	CreatedAfter  time.Time `query:"created_after" json:"created_after,omitzero" doc:"only runs created at or after this time (RFC 3339), to the millisecond: the time of the run's id (UUIDv7)"`
	CreatedBefore time.Time `query:"created_before" json:"created_before,omitzero" doc:"only runs created before this time (RFC 3339), to the millisecond: the time of the run's id (UUIDv7)"`
	ErrorCode     string    `query:"error_code" json:"error_code,omitempty" maxLength:"256" doc:"only failed runs whose error has this code: the code of the step error that failed the run (error.cause.code)"`
	Parent        string    `query:"parent" json:"parent,omitempty" format:"uuid" doc:"only runs started by this run (child runs)"`
}

// listParams checks the filters and returns them as the catalog takes them, or a
// *validationError naming each bad parameter, at where ("query." for the
// parameters of a list, "body.filter." for a bulk operation's filter). They keep
// the runs of the request's namespace only.
func (f *RunFilterParams) listParams(ctx context.Context, where string) (*catalog.RunListParams, error) {
	p := &catalog.RunListParams{
		Workflow: qualify(ctx, f.Workflow), Status: f.Status, Version: f.Version, ErrorCode: f.ErrorCode,
		CreatedAfter: f.CreatedAfter, CreatedBefore: f.CreatedBefore, Namespace: requestNamespace(ctx),
	}
	var errs []error
	bad := func(loc, msg, value string) {
		errs = append(errs, &huma.ErrorDetail{Location: loc, Message: msg, Value: truncate(value, maxEchoed)})
	}
	if f.Version != 0 && f.Workflow == "" {
		bad(where+"version", "a version filter needs the workflow filter: versions are numbered per workflow", strconv.Itoa(f.Version))
	}
	if f.Parent != "" {
		id, err := uuid.Parse(f.Parent)
		if err != nil {
			bad(where+"parent", "expected a run ID (a UUID)", f.Parent)
		}
		p.Parent = id
	}
	for i, l := range f.Labels {
		loc := where + "label[" + strconv.Itoa(i) + "]"
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			bad(loc, "expected key=value", l)
			continue
		}
		if msg := catalog.LabelProblem(k, v); msg != "" {
			bad(loc, msg, l)
			continue
		}
		if p.Labels == nil {
			p.Labels = catalog.Labels{}
		}
		if prev, dup := p.Labels[k]; dup && prev != v {
			bad(loc, fmt.Sprintf("label %s is given twice with different values: no run carries both", k), l)
			continue
		}
		p.Labels[k] = v
	}
	if len(errs) > 0 {
		return nil, &validationError{errs: errs}
	}
	return p, nil
}

// runFilterKey is what a cursor of the runs list is bound to: a digest of the
// filters as the catalog applies them (labels as a set, times to the millisecond),
// so that a cursor stays small whatever the filters and works only with the
// filters it was issued for.
func runFilterKey(p *catalog.RunListParams) string {
	bound := func(t time.Time) uuid.UUID {
		if t.IsZero() {
			return uuid.Nil
		}
		return catalog.FirstRunIDAt(t)
	}
	b, _ := json.Marshal(struct { // never fails: strings, numbers and a map of strings
		Namespace string            `json:"n,omitempty"`
		Workflow  string            `json:"w"`
		Status    string            `json:"s"`
		Labels    map[string]string `json:"l"`
		Version   int               `json:"v"`
		ErrorCode string            `json:"e"`
		Parent    uuid.UUID         `json:"p"`
		After     uuid.UUID         `json:"a"`
		Before    uuid.UUID         `json:"b"`
	}{p.Namespace, p.Workflow, p.Status, p.Labels, p.Version, p.ErrorCode, p.Parent, bound(p.CreatedAfter), bound(p.CreatedBefore)})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// checkLabels returns a *validationError naming each label of a run to start that
// breaks the rules (catalog.LabelProblem), at body.labels.<key>, or nil. Their
// number is bounded by the schema (maxProperties), and text PostgreSQL cannot
// store is refused before (withTextChecks).
func checkLabels(labels map[string]string) error {
	keys := slices.Sorted(maps.Keys(labels))
	var errs []error
	for _, k := range keys {
		v := labels[k]
		if msg := catalog.LabelProblem(k, v); msg != "" {
			errs = append(errs, &huma.ErrorDetail{Location: "body.labels." + truncate(k, maxEchoed), Message: msg, Value: truncate(v, maxEchoed)})
		}
	}
	if len(errs) > 0 {
		return &validationError{errs: errs}
	}
	return nil
}
