package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
)

// The audit log (docs/security.md, "Audit log"). Every operation that needs a
// role and is not a GET is a write, and is audited here, whatever it is (a new
// one too): auditMiddleware puts a catalog.Audit in its context, and the first
// transaction of the catalog that writes under it inserts the record before it
// commits (catalog/audit.go). Then, when no transaction recorded it:
//   - a 4xx problem (the write was refused): a record with outcome failed and the
//     problem's code, in a statement of its own (the write's transactions rolled
//     back, so there is none to share);
//   - a success that wrote nothing (pausing a paused run, an export): a record
//     with outcome ok, in a statement of its own;
//   - a 5xx or a client gone (499): nothing. The write's transaction rolled back
//     or its outcome is unknown; the log never claims a write that did not commit.

// auditKind is the blob store kind of audit exports: not among the blob
// collector's kinds (maintenance/collector.go), so an export is never collected.
const auditKind = "audit"

// auditMiddleware audits the writes (see the top of audit.go). It runs after
// authMiddleware: the request's identity is known.
func (s *Server) auditMiddleware(ctx huma.Context, next func(huma.Context)) {
	op := ctx.Operation()
	if need, _ := op.Metadata[metaRole].(Role); need == RoleNone || op.Method == http.MethodGet {
		next(ctx)
		return
	}
	who, _ := ctx.Context().Value(identityKey).(Identity)
	ns := requestNamespace(ctx.Context())
	a := &catalog.Audit{Actor: who.Name, Role: who.Role.String(), Namespace: &ns, Action: op.OperationID, Target: auditTarget(ctx, op),
		RequestID: RequestID(ctx.Context())}
	next(huma.WithContext(ctx, catalog.WithAudit(ctx.Context(), a)))
	if a.Recorded() {
		return
	}
	record := s.store.AuditRecordDone
	switch status := ctx.Status(); {
	case status == statusClientClosed || status >= 500:
		return
	case status >= 400:
		if a.Code == "" {
			a.Code = classOfStatus(status).code
		}
		record = s.store.AuditRecordFailed
	}
	if err := record(context.WithoutCancel(ctx.Context()), a); err != nil {
		s.logger.ErrorContext(ctx.Context(), "audit record lost", "request_id", a.RequestID, "action", a.Action, "error", err)
	}
}

// statusClientClosed is the status of classClientClosed (nginx's 499).
const statusClientClosed = 499

// auditFailure notes p's code as the outcome of the write audited under ctx, if
// one is, and returns p.
func auditFailure(ctx context.Context, p *Problem) *Problem {
	if a := catalog.AuditOf(ctx); a != nil {
		a.Code = p.Code
	}
	return p
}

// auditTarget names what a write acts on: its path parameters, "name=value"
// each, in the path's order ("id=0193…", "name=deploy alias=prod"). A refused
// write's parameters may be anything a client sent: the text is made one the
// catalog stores (valid UTF-8, no NUL) and cut to maxAuditTarget bytes.
func auditTarget(ctx huma.Context, op *huma.Operation) string {
	var parts []string
	for _, p := range op.Parameters {
		if p.In == "path" {
			parts = append(parts, p.Name+"="+ctx.Param(p.Name))
		}
	}
	t := strings.ReplaceAll(strings.ToValidUTF8(strings.Join(parts, " "), "\uFFFD"), "\x00", "\uFFFD")
	return truncate(t, maxAuditTarget)
}

// maxAuditTarget bounds an audit record's target, in bytes.
const maxAuditTarget = 512

// AuditRecord is a record of the audit log.
type AuditRecord struct {
	Seq       int64     `json:"seq" doc:"orders the log"`
	At        time.Time `json:"at" doc:"when the write's transaction began"`
	Actor     string    `json:"actor" doc:"the name of the token"`
	Role      string    `json:"role" doc:"the token's role"`
	Action    string    `json:"action" doc:"the operation's ID (cancelRun, setAlias, createToken…) or uiLogin"`
	Target    string    `json:"target" doc:"the operation's path parameters, name=value each; empty when it has none"`
	RequestID string    `json:"request_id" doc:"the request's X-Request-Id"`
	Outcome   string    `json:"outcome" enum:"ok,failed"`
	Code      string    `json:"code,omitempty" doc:"a failed write's problem code"`
}

func auditRecordOf(r *catalog.AuditRecord) AuditRecord {
	return AuditRecord{Seq: r.Seq, At: r.At.UTC(), Actor: r.Actor, Role: r.Role, Action: r.Action, Target: r.Target,
		RequestID: r.RequestID, Outcome: r.Outcome, Code: r.Code}
}

// AuditListParams filter GET /v1/audit.
type AuditListParams struct {
	Since  time.Time `query:"since" doc:"only records at or after this time (RFC 3339)"`
	Actor  string    `query:"actor" maxLength:"63" doc:"only this actor's records"`
	Action string    `query:"action" maxLength:"100" doc:"only this action's records (an operation ID, or uiLogin)"`
}

// ExportAuditBody is the body of POST /v1/audit/export.
type ExportAuditBody struct {
	Since *time.Time `json:"since,omitempty" doc:"records at or after this time; absent: from the first"`
	Until *time.Time `json:"until,omitempty" doc:"records before this time; absent: up to now"`
}

// AuditExport is where an export was written.
type AuditExport struct {
	Key     string `json:"key" doc:"the blob store key of the JSON Lines file (one AuditRecord a line, oldest first)"`
	Records int    `json:"records"`
	Size    int64  `json:"size" doc:"bytes"`
	URL     string `json:"url,omitempty" doc:"a presigned URL that reads it for an hour, where the blob store has them"`
}

func (s *Server) registerAudit() {
	register(s, everyNamespace(huma.Operation{
		OperationID: "listAudit",
		Method:      http.MethodGet,
		Path:        "/v1/audit",
		Summary:     "List the audit log",
		Description: "Who did what through the API: one record per write (and per UI login), newest first, keyset-paginated. A refused write has outcome `failed` and its problem's code.",
		Tags:        []string{"audit"},
	}), RoleAdmin, []problemClass{classInvalidCursor}, func(ctx context.Context, in *struct {
		AuditListParams
		PageParams
	}) (*listOutput[AuditRecord], error) {
		filter := in.Since.UTC().Format(time.RFC3339Nano) + "\x00" + in.Actor + "\x00" + in.Action
		var before int64
		if err := s.decodeCursor(in.Cursor, "audit", filter, &before); err != nil {
			return nil, err
		}
		rows, err := s.store.AuditList(ctx, catalog.AuditListParams{Since: in.Since, Actor: in.Actor, Action: in.Action,
			Before: before, Limit: in.Limit + 1})
		if err != nil {
			return nil, err
		}
		out := &listOutput[AuditRecord]{}
		out.Body.Items = make([]AuditRecord, 0, len(rows))
		for i := range rows {
			if i == in.Limit {
				out.Body.NextCursor = s.encodeCursor("audit", filter, rows[i-1].Seq)
				break
			}
			out.Body.Items = append(out.Body.Items, auditRecordOf(&rows[i]))
		}
		return out, nil
	})

	register(s, everyNamespace(huma.Operation{
		OperationID: "exportAudit",
		Method:      http.MethodPost,
		Path:        "/v1/audit/export",
		Summary:     "Export the audit log",
		Description: "Writes the records of a time range to the blob store as JSON Lines (one record a line, oldest first, as GET /v1/audit shows them) and answers its key. Exports are never collected; keep one before the audit retention (CAIRN_AUDIT_RETENTION) deletes its records.",
		Tags:        []string{"audit"},
	}), RoleAdmin, nil, func(ctx context.Context, in *struct{ Body *ExportAuditBody }) (*struct{ Body AuditExport }, error) {
		var since, until time.Time
		if in.Body != nil && in.Body.Since != nil {
			since = *in.Body.Since
		}
		if in.Body != nil && in.Body.Until != nil {
			until = *in.Body.Until
		}
		return s.exportAudit(ctx, since, until)
	})
}

// exportAudit streams the records in [since, until) to the blob store.
func (s *Server) exportAudit(ctx context.Context, since, until time.Time) (*struct{ Body AuditExport }, error) {
	pr, pw := io.Pipe()
	records := 0
	go func() {
		enc := json.NewEncoder(pw)
		var after int64
		for {
			rows, err := s.store.AuditRange(ctx, since, until, after, 1000)
			if err != nil {
				_ = pw.CloseWithError(err)
				return
			}
			for i := range rows {
				if err := enc.Encode(auditRecordOf(&rows[i])); err != nil {
					_ = pw.CloseWithError(err)
					return
				}
			}
			records += len(rows)
			if len(rows) < 1000 {
				_ = pw.Close()
				return
			}
			after = rows[len(rows)-1].Seq
		}
	}()
	obj, err := s.blobs.Put(ctx, auditKind, pr, blobstore.PutOptions{ContentType: "application/x-ndjson", Size: -1})
	_ = pr.CloseWithError(io.ErrClosedPipe) // ends the writer if Put stopped early
	if err != nil {
		return nil, err
	}
	out := &struct{ Body AuditExport }{Body: AuditExport{Key: obj.Key, Records: records, Size: obj.Size}}
	if u, err := s.blobs.PresignGet(ctx, obj.Key, time.Hour); err == nil {
		out.Body.URL = u
	}
	return out, nil
}
