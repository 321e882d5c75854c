package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/catalog"
)

// HealthOutput is the body of /healthz and /readyz.
type HealthOutput struct {
	Body struct {
		Status string            `json:"status" enum:"ok,unavailable" doc:"ok when every check passed"`
		Checks map[string]string `json:"checks,omitempty" doc:"each check and its result: ok, or what failed; with a dispatcher, also what it can run (exec, http, lambda, builtin, cache: ok, or unavailable and why), which does not fail readiness"`
	}
}

func (s *Server) registerHealth() {
	register(s, huma.Operation{
		OperationID: "healthz",
		Method:      http.MethodGet,
		Path:        "/healthz",
		Summary:     "Liveness",
		Description: "Answers 200 while the process serves HTTP.",
		Tags:        []string{"health"},
	}, RoleNone, nil, func(ctx context.Context, _ *struct{}) (*HealthOutput, error) {
		out := &HealthOutput{}
		out.Body.Status = "ok"
		return out, nil
	})

	register(s, huma.Operation{
		OperationID: "readyz",
		Method:      http.MethodGet,
		Path:        "/readyz",
		Summary:     "Readiness",
		Description: "Checks the database, the blob store and the schema version; 503 names the failing check.",
		Tags:        []string{"health"},
	}, RoleNone, []problemClass{classUnavailable}, func(ctx context.Context, _ *struct{}) (*HealthOutput, error) {
		checks, ok := s.readiness(ctx)
		if !ok {
			return nil, &readyError{checks: checks}
		}
		out := &HealthOutput{}
		out.Body.Status = "ok"
		out.Body.Checks = checks
		return out, nil
	})
}

// readiness runs every check with a short deadline and reports each by name.
func (s *Server) readiness(ctx context.Context) (map[string]string, bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	checks := map[string]string{}
	ok := true
	record := func(name string, err error) {
		if err != nil {
			ok = false
			checks[name] = err.Error()
			return
		}
		checks[name] = "ok"
	}
	dbErr := s.store.Ping(ctx)
	if dbErr != nil {
		s.logger.WarnContext(ctx, "readiness: database", "error", dbErr)
		record("database", errors.New("unreachable"))
	} else {
		record("database", nil)
	}
	if dbErr == nil {
		err := s.store.CheckSchema(ctx)
		if err != nil && !errors.Is(err, catalog.ErrSchemaBehind) && !errors.Is(err, catalog.ErrSchemaAhead) {
			err = errors.New("cannot read the schema version")
		}
		record("migrations", err)
	} else {
		record("migrations", errors.New("database unavailable"))
	}
	if err := s.blobs.Ping(ctx); err != nil {
		s.logger.WarnContext(ctx, "readiness: blob store", "error", err)
		record("blobstore", errors.New("unreachable"))
	} else {
		record("blobstore", nil)
	}
	if s.cfg.ReadyCheck != nil {
		record("runtime", s.cfg.ReadyCheck(ctx))
	}
	if s.cfg.Capabilities != nil {
		for what, state := range s.cfg.Capabilities() {
			checks[what] = state
		}
	}
	return checks, ok
}
