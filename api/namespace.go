package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/namespace"
)

// Namespaces (docs/security.md, "Namespaces"; package namespace for the keys).
//
// Every request acts in one namespace: the one its token is scoped to, else the
// one its Cairn-Namespace header names, else default. Two rules hold in this file
// and the handlers:
//   - a name that comes in is qualified in the request's namespace (s.qualify) and
//     a key that goes out is stripped (namespace.Strip), so that the same name
//     in two namespaces is two objects, and a list shows its namespace's only;
//   - an object reached by its ID (a run and all under it, a schedule, an
//     operation, an archived run, a bundle) is checked against a scoped token's
//     namespace before the handler runs (scopeMiddleware): one of another
//     namespace is a 404, as a missing one is. A token of every namespace (the
//     static tokens, an unscoped managed token) reaches any object by its ID.
//
// The operations that act across namespaces (tokens, the audit log, capacity,
// creating namespaces) are for tokens of every namespace: metaEveryNamespace.

// namespaceKey holds the request's namespace in its context.
const namespaceKey ctxKey = iota + 20

// metaEveryNamespace marks an operation that a token scoped to one namespace may
// not call (403).
const metaEveryNamespace = "cairn-every-namespace"

// requestNamespace is the namespace a request acts in; default outside a request.
func requestNamespace(ctx context.Context) string {
	if ns, ok := ctx.Value(namespaceKey).(string); ok {
		return ns
	}
	return namespace.Default
}

// qualify is the catalog's key of name in the request's namespace.
func qualify(ctx context.Context, name string) string {
	return namespace.Qualify(requestNamespace(ctx), name)
}

// withNamespaceHeader declares the Cairn-Namespace header on op, an operation
// that acts in a namespace (one that needs a role, and webhook deliveries), for
// the OpenAPI document; enterNamespace reads it. The Go client sends it with
// client.WithNamespace (its generator leaves the parameter out: client/gen).
func withNamespaceHeader(op huma.Operation, role Role) huma.Operation {
	if role == RoleNone && op.OperationID != "deliverHook" {
		return op
	}
	op.Parameters = append(op.Parameters, &huma.Param{
		Name: namespace.Header, In: "header",
		Description: "the namespace the request acts in; default: the token's, else default (docs/security.md, \"Namespaces\")",
		Schema:      &huma.Schema{Type: "string", Pattern: namespace.Pattern.String()},
	})
	return op
}

// everyNamespace marks op as one only a token of every namespace may call.
func everyNamespace(op huma.Operation) huma.Operation {
	if op.Metadata == nil {
		op.Metadata = map[string]any{}
	}
	op.Metadata[metaEveryNamespace] = true
	if op.Description != "" {
		op.Description += " "
	}
	op.Description += "A token scoped to one namespace may not call it (403)."
	return op
}

// enterNamespace picks the request's namespace for who (see the top of this file)
// and calls next with it, or answers 404 namespace_not_found, or 403 for an
// operation of every namespace called with a scoped token.
func (s *Server) enterNamespace(ctx huma.Context, who Identity, next func(huma.Context)) {
	asked := strings.TrimSpace(ctx.Header(namespace.Header))
	if asked == "" && ctx.Operation().OperationID == "deliverHook" {
		asked = strings.TrimSpace(ctx.Query("namespace")) // a webhook's sender sets no header
	}
	ns := who.Namespace
	switch {
	case ns != "" && asked != "" && asked != ns:
		s.writeProblemCtx(ctx, classNamespaceNotFound.problem(fmt.Sprintf("namespace %q not found", asked)))
		return
	case ns == "" && asked == "":
		ns = namespace.Default
	case ns == "":
		ns = asked
	}
	if every, _ := ctx.Operation().Metadata[metaEveryNamespace].(bool); every && who.Namespace != "" {
		s.writeProblemCtx(ctx, classForbidden.problem(fmt.Sprintf("this operation is for tokens of every namespace; the token is scoped to %s", who.Namespace)))
		return
	}
	if ns != namespace.Default {
		if err := s.namespaces.check(ctx.Context(), s.store, ns); err != nil {
			if errors.Is(err, catalog.ErrNotFound) {
				err = classNamespaceNotFound.problem(fmt.Sprintf("namespace %q not found", ns))
			}
			s.writeProblemCtx(ctx, s.problemFor(ctx.Context(), err))
			return
		}
	}
	ctx = huma.WithValue(ctx, namespaceKey, ns)
	if who.Namespace != "" {
		if err := s.inScope(ctx, who.Namespace); err != nil {
			s.writeProblemCtx(ctx, s.problemFor(ctx.Context(), err))
			return
		}
	}
	next(ctx)
}

// inScope returns a not-found error when the object the operation's path reaches by
// its ID is not of namespace ns; nil for an operation that reaches none by ID. The
// error is the one a missing object's lookup gives (catalog.ErrNotFound, no detail
// of its own): a detail naming the object would tell that it exists.
func (s *Server) inScope(ctx huma.Context, ns string) error {
	path := ctx.Operation().Path
	c := ctx.Context()
	var have string
	var err error
	switch {
	case strings.HasPrefix(path, "/v1/runs/{id}"), strings.HasPrefix(path, "/v1/archived-runs/{id}"):
		id, perr := uuid.Parse(ctx.Param("id"))
		if perr != nil {
			return nil // the handler answers a bad ID
		}
		if strings.HasPrefix(path, "/v1/runs/") {
			have, err = s.store.RunNamespace(c, id)
		} else {
			var r *catalog.ArchivedRun
			if r, err = s.store.ArchivedRunGet(c, id); err == nil {
				have = namespace.Of(r.Workflow)
			}
		}
		if have != ns && err == nil {
			err = catalog.ErrNotFound
		}
	case strings.HasPrefix(path, "/v1/schedules/{id}"):
		id, perr := strconv.ParseInt(ctx.Param("id"), 10, 64)
		if perr != nil {
			return nil
		}
		if have, err = s.store.ScheduleNamespace(c, id); err == nil && have != ns {
			err = catalog.ErrNotFound
		}
	case strings.HasPrefix(path, "/v1/operations/{id}"):
		id, perr := uuid.Parse(ctx.Param("id"))
		if perr != nil {
			return nil
		}
		var op *catalog.Operation
		if op, err = s.store.OperationGet(c, id); err == nil && operationNamespace(op) != ns {
			err = catalog.ErrNotFound
		}
	case strings.HasPrefix(path, "/v1/bundles/{digest}"):
		var ok bool
		if ok, err = s.store.BundleInNamespace(c, ctx.Param("digest"), ns); err == nil && !ok {
			err = catalog.ErrNotFound
		}
	}
	return err
}

// operationNamespace is the namespace of a bulk operation: its filter's.
func operationNamespace(op *catalog.Operation) string {
	var f catalog.RunListParams
	if json.Unmarshal(op.Filter, &f) != nil || f.Namespace == "" {
		return namespace.Default
	}
	return f.Namespace
}

// eventKeys are the catalog's name and id of an event sent in the request's
// namespace. An event of a namespace other than default gets its id here when it
// has none (the catalog would make one without the namespace). An id of default
// that starts with an existing namespace's name and '/' is refused: it would be
// that namespace's event.
func (s *Server) eventKeys(ctx context.Context, name, id string) (string, string, error) {
	ns := requestNamespace(ctx)
	switch {
	case ns == namespace.Default:
		if prefix, _, ok := strings.Cut(id, "/"); ok && s.namespaces.check(ctx, s.store, prefix) == nil {
			return "", "", classValidationFailed.problem("reserved event id", &huma.ErrorDetail{Location: "body.id", Value: id,
				Message: fmt.Sprintf("an id that starts with %q is the namespace %s's: choose another", prefix+"/", prefix)})
		}
	case id == "":
		u, err := uuid.NewV7()
		if err != nil {
			return "", "", err
		}
		id = u.String()
	}
	return namespace.Qualify(ns, name), namespace.Qualify(ns, id), nil
}

// eventIDOf is the id of ev as its sender gave it: without its namespace.
func eventIDOf(ev *catalog.ReceivedEvent) string {
	if ns := namespace.Of(ev.Name); ns != namespace.Default {
		return strings.TrimPrefix(ev.ID, ns+"/")
	}
	return ev.ID
}

// writeProblemCtx answers p from a middleware.
func (s *Server) writeProblemCtx(ctx huma.Context, p *Problem) {
	for k, v := range p.headers {
		for _, x := range v {
			ctx.AppendHeader(k, x)
		}
	}
	ctx.SetHeader("Content-Type", "application/problem+json")
	ctx.SetStatus(p.Status)
	_ = json.NewEncoder(ctx.BodyWriter()).Encode(p)
}

// namespaceCache remembers the namespaces known to exist: a namespace is never
// removed, so a positive answer holds; a negative one is asked again each time.
type namespaceCache struct {
	mu    sync.Mutex
	known map[string]struct{}
}

func (c *namespaceCache) check(ctx context.Context, store *catalog.Store, ns string) error {
	c.mu.Lock()
	_, ok := c.known[ns]
	c.mu.Unlock()
	if ok {
		return nil
	}
	if err := namespace.Check(ns); err != nil {
		return catalog.ErrNotFound
	}
	if _, err := store.NamespaceGet(ctx, ns); err != nil {
		return err
	}
	c.mu.Lock()
	if c.known == nil {
		c.known = map[string]struct{}{}
	}
	c.known[ns] = struct{}{}
	c.mu.Unlock()
	return nil
}

// APINamespace is a namespace.
type APINamespace struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	CreatedBy string    `json:"created_by"`
}

func apiNamespaceOf(n *catalog.Namespace) APINamespace {
	return APINamespace{Name: n.Name, CreatedAt: n.CreatedAt.UTC(), CreatedBy: n.CreatedBy}
}

// CreateNamespaceBody is the body of POST /v1/namespaces.
type CreateNamespaceBody struct {
	Name string `json:"name" pattern:"^[a-z0-9][a-z0-9-]*$" maxLength:"31" doc:"1 to 31 lower-case letters, digits and '-'"`
}

func (s *Server) registerNamespaces() {
	register(s, everyNamespace(huma.Operation{
		OperationID:   "createNamespace",
		Method:        http.MethodPost,
		Path:          "/v1/namespaces",
		Summary:       "Create a namespace",
		Description:   "A new namespace: its workflows, runs, secrets, limits, schedules, hooks and events are its own (select it with the Cairn-Namespace header, or a token scoped to it). 409 conflict if it exists.",
		Tags:          []string{"namespaces"},
		DefaultStatus: http.StatusCreated,
	}), RoleAdmin, []problemClass{classConflict}, func(ctx context.Context, in *struct{ Body CreateNamespaceBody }) (*struct{ Body APINamespace }, error) {
		n, err := s.store.NamespaceCreate(ctx, in.Body.Name, actor(ctx))
		if err != nil {
			if errors.Is(err, catalog.ErrConflict) {
				return nil, classConflict.problem(fmt.Sprintf("namespace %q exists", in.Body.Name))
			}
			return nil, err
		}
		return &struct{ Body APINamespace }{Body: apiNamespaceOf(n)}, nil
	})

	register(s, huma.Operation{
		OperationID: "listNamespaces",
		Method:      http.MethodGet,
		Path:        "/v1/namespaces",
		Summary:     "List namespaces",
		Description: "The namespaces by name; a token scoped to one namespace sees that one only.",
		Tags:        []string{"namespaces"},
	}, RoleViewer, []problemClass{classInvalidCursor}, func(ctx context.Context, in *struct{ PageParams }) (*listOutput[APINamespace], error) {
		out := &listOutput[APINamespace]{}
		out.Body.Items = []APINamespace{}
		if scoped := identity(ctx).Namespace; scoped != "" {
			n, err := s.store.NamespaceGet(ctx, scoped)
			if err != nil {
				return nil, err
			}
			out.Body.Items = append(out.Body.Items, apiNamespaceOf(n))
			return out, nil
		}
		var after string
		if err := s.decodeCursor(in.Cursor, "namespaces", "", &after); err != nil {
			return nil, err
		}
		rows, err := s.store.NamespaceList(ctx, after, in.Limit+1)
		if err != nil {
			return nil, err
		}
		for i := range rows {
			if i == in.Limit {
				out.Body.NextCursor = s.encodeCursor("namespaces", "", rows[i-1].Name)
				break
			}
			out.Body.Items = append(out.Body.Items, apiNamespaceOf(&rows[i]))
		}
		return out, nil
	})

	register(s, huma.Operation{
		OperationID: "getNamespace",
		Method:      http.MethodGet,
		Path:        "/v1/namespaces/{namespace}",
		Summary:     "Get a namespace",
		Tags:        []string{"namespaces"},
	}, RoleViewer, []problemClass{classNotFound}, func(ctx context.Context, in *struct {
		Namespace string `path:"namespace" maxLength:"31"`
	}) (*struct{ Body APINamespace }, error) {
		if scoped := identity(ctx).Namespace; scoped != "" && scoped != in.Namespace {
			return nil, withDetail(errNotFound, "namespace %q not found", in.Namespace)
		}
		n, err := s.store.NamespaceGet(ctx, in.Namespace)
		if err != nil {
			return nil, withDetail(err, "namespace %q not found", in.Namespace)
		}
		return &struct{ Body APINamespace }{Body: apiNamespaceOf(n)}, nil
	})
}
