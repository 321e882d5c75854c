package ui

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	openapi_types "github.com/oapi-codegen/runtime/types"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/namespace"
)

// view is what every page template gets.
type view struct {
	Title string
	Nav   string // the section of the header's navigation the page is in
	Flash string // what the last action did (after its redirect)
	Who   string
	Role  string
	// Namespace is the namespace the pages show; Namespaces, for a session of
	// every namespace, those it may choose (POST /ui/namespace); empty for a
	// session scoped to one.
	Namespace  string
	Namespaces []string
	Scoped     bool
	CSRF       string
	CanOperate bool
	LoggedIn   bool
	Data       any
}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"ts":       fmtTime,
		"when":     when,
		"navItems": func() []navItem { return navItems },
		"errorOf":  errorOf,
		"histURL":  historyURL,
		"mapCount": mapCount,
		"plural":   func(n int64, noun string) string { return plural(int(n), noun) },
		"ago":      ago,
		"dur":      duration,
		"pretty":   pretty,
		"deref":    func(s *string) string { return derefStr(s) },
		"list":     func(p *[]string) []string { return deref(p) },
		"derefInt": func(n *int64) int64 { return derefInt(n) },
		"short":    func(id string) string { return shortID(id) },
		"pathesc":  url.PathEscape,
		"isBlob":   isBlob,
		"json":     func(v any) string { b, _ := json.Marshal(v); return string(b) },
	}
	base, err := template.New("base").Funcs(funcs).ParseFS(templateFS, "templates/base.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"login", "workflows", "workflow", "runs", "run", "error", "schedules", "operation", "limits", "confirm", "items", "approvals", "events", "event", "audit"} {
		t, err := template.Must(base.Clone()).ParseFS(templateFS, "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", name, err)
		}
		pages[name] = t
	}
	for _, name := range []string{"step", "timeline"} {
		t, err := template.New(name+".html").Funcs(funcs).ParseFS(templateFS, "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		pages[name] = t
	}
	return pages, nil
}

// render writes a page (or the step fragment) with the session's view.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, s *session, page string, data any) {
	h.renderStatus(w, r, s, page, http.StatusOK, data)
}

func (h *Handler) renderStatus(w http.ResponseWriter, r *http.Request, s *session, page string, status int, data any) {
	v := view{Title: titleOf(page, data), Nav: navOf[page], Data: data}
	if s != nil {
		v.LoggedIn, v.Who, v.Role, v.CSRF, v.CanOperate = true, s.who.Name, s.who.Role.String(), s.csrf, s.canOperate()
		v.Namespace, v.Scoped = s.ns, s.who.Namespace != ""
		if s.who.Namespace == "" {
			v.Namespaces = h.namespaceChoices(r.Context(), s)
		}
		v.Flash = takeFlash(w, r)
	}
	var buf bytes.Buffer
	name := "base"
	if page == "step" || page == "timeline" {
		name = page + ".html"
	}
	if err := h.pages[page].ExecuteTemplate(&buf, name, v); err != nil {
		h.logger.ErrorContext(r.Context(), "render page", "page", page, "error", err)
		http.Error(w, "the page failed to render", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail shows an API error as a page with the problem's status.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	status, msg := problemText(err)
	if status < 400 || status > 599 {
		status = http.StatusBadGateway
	}
	h.renderStatus(w, r, s, "error", status, map[string]any{"Status": status, "Message": msg})
}

func (h *Handler) workflowsPage(w http.ResponseWriter, r *http.Request, s *session) {
	params := &client.ListWorkflowsParams{Limit: ptr(int64(100))}
	if c := r.URL.Query().Get("cursor"); c != "" {
		params.Cursor = &c
	}
	res, err := s.api.ListWorkflowsWithResponse(r.Context(), params)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	h.render(w, r, s, "workflows", map[string]any{"Items": deref(res.JSON200.Items), "Next": derefStr(res.JSON200.NextCursor)})
}

func (h *Handler) workflowPage(w http.ResponseWriter, r *http.Request, s *session) {
	name := r.PathValue("name")
	ctx := r.Context()
	wf, err := s.api.GetWorkflowWithResponse(ctx, name)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	vs, err := s.api.ListVersionsWithResponse(ctx, name, &client.ListVersionsParams{Limit: ptr(int64(100))})
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	aliases, err := s.api.ListAliasesWithResponse(ctx, name, &client.ListAliasesParams{Limit: ptr(int64(100))})
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	shown := wf.JSON200.LatestVersion
	if v, err := strconv.ParseInt(r.URL.Query().Get("version"), 10, 64); err == nil && v > 0 {
		shown = v
	}
	var def *client.Version
	if shown > 0 {
		got, err := s.api.GetVersionWithResponse(ctx, name, shown)
		if err != nil {
			h.fail(w, r, s, err)
			return
		}
		def = got.JSON200
	}
	data := map[string]any{
		"Title":    "Workflow " + name,
		"Workflow": wf.JSON200, "Versions": deref(vs.JSON200.Items), "Aliases": deref(aliases.JSON200.Items),
		"Shown": def,
	}
	// The diff of two versions' definitions: ?from=N&to=M.
	from, errFrom := strconv.ParseInt(r.URL.Query().Get("from"), 10, 64)
	to, errTo := strconv.ParseInt(r.URL.Query().Get("to"), 10, 64)
	data["DiffFrom"], data["DiffTo"] = wf.JSON200.LatestVersion-1, wf.JSON200.LatestVersion
	if errFrom == nil && errTo == nil && from > 0 && to > 0 {
		a, err := s.api.GetVersionWithResponse(ctx, name, from)
		if err != nil {
			h.fail(w, r, s, err)
			return
		}
		b, err := s.api.GetVersionWithResponse(ctx, name, to)
		if err != nil {
			h.fail(w, r, s, err)
			return
		}
		data["DiffFrom"], data["DiffTo"] = from, to
		data["Diff"] = collapse(lineDiff(prettyAll(a.JSON200.Definition), prettyAll(b.JSON200.Definition)))
	}
	h.render(w, r, s, "workflow", data)
}

func (h *Handler) resumeWorkflow(w http.ResponseWriter, r *http.Request, s *session) {
	name := r.PathValue("name")
	_, err := s.api.ResumeWorkflowWithResponse(r.Context(), name, client.ControlBody{Reason: optional(r.PostFormValue("reason"))})
	h.done(w, r, s, err, "/ui/workflows/"+url.PathEscape(name), "Workflow "+name+" resumed: its paused runs go on.")
}

func (h *Handler) startRun(w http.ResponseWriter, r *http.Request, s *session) {
	name := r.PathValue("name")
	body := client.StartRunBody{}
	if in := strings.TrimSpace(r.PostFormValue("input")); in != "" {
		var v any
		if err := json.Unmarshal([]byte(in), &v); err != nil {
			h.renderStatus(w, r, s, "error", http.StatusBadRequest, map[string]any{"Status": 400, "Message": "input is not JSON: " + err.Error()})
			return
		}
		body.Input = v
	}
	res, err := s.api.StartRunWithResponse(r.Context(), name, &client.StartRunParams{}, body)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	h.done(w, r, s, nil, "/ui/runs/"+res.JSON202.Id, "Run started.")
}

// after answers an action: the problem as a page, or back to the page it came from.
func (h *Handler) after(w http.ResponseWriter, r *http.Request, s *session, err error, next string) {
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// runFilter is the runs list's filter as read from a URL query: the filters of
// GET /v1/runs, under the same names, so a list's URL can be shared.
type runFilter struct {
	Workflow, Status, ErrorCode, Version, CreatedAfter, CreatedBefore, Parent string
	Labels                                                                    []string
}

func filterOf(q url.Values) runFilter {
	f := runFilter{
		Workflow: q.Get("workflow"), Status: q.Get("status"), ErrorCode: q.Get("error_code"),
		Version: q.Get("version"), CreatedAfter: q.Get("created_after"), CreatedBefore: q.Get("created_before"),
		Parent: q.Get("parent"),
	}
	for _, l := range q["label"] {
		if l = strings.TrimSpace(l); l != "" {
			f.Labels = append(f.Labels, l)
		}
	}
	return f
}

// query is the filter as URL query values (without the cursor).
func (f runFilter) query() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"workflow": f.Workflow, "status": f.Status, "error_code": f.ErrorCode, "version": f.Version, "created_after": f.CreatedAfter, "created_before": f.CreatedBefore, "parent": f.Parent} {
		if v != "" {
			q.Set(k, v)
		}
	}
	for _, l := range f.Labels {
		q.Add("label", l)
	}
	return q
}

// LabelText is the labels as one input's text: k=v pairs separated by spaces.
func (f runFilter) LabelText() string { return strings.Join(f.Labels, " ") }

// params converts the filter to the API's parameters; a malformed time or number is
// refused here, naming the field.
func (f runFilter) params() (*client.ListRunsParams, client.RunFilterParams, error) {
	p := &client.ListRunsParams{}
	var b client.RunFilterParams
	if f.Workflow != "" {
		p.Workflow, b.Workflow = &f.Workflow, &f.Workflow
	}
	if f.Status != "" {
		st := client.ListRunsParamsStatus(f.Status)
		bs := client.RunFilterParamsStatus(f.Status)
		p.Status, b.Status = &st, &bs
	}
	if f.ErrorCode != "" {
		p.ErrorCode, b.ErrorCode = &f.ErrorCode, &f.ErrorCode
	}
	if f.Version != "" {
		v, err := strconv.ParseInt(f.Version, 10, 64)
		if err != nil {
			return nil, b, fmt.Errorf("version: want a number")
		}
		p.Version, b.Version = &v, &v
	}
	for _, t := range []struct {
		name string
		in   string
		out  **time.Time
		bout **time.Time
	}{{"created_after", f.CreatedAfter, &p.CreatedAfter, &b.CreatedAfter}, {"created_before", f.CreatedBefore, &p.CreatedBefore, &b.CreatedBefore}} {
		if t.in == "" {
			continue
		}
		tm, err := parseTime(t.in)
		if err != nil {
			return nil, b, fmt.Errorf("%s: want a time such as 2026-12-01T10:00:00Z or 2026-12-01T10:00", t.name)
		}
		*t.out, *t.bout = &tm, &tm
	}
	if f.Parent != "" {
		id, err := uuid.Parse(f.Parent)
		if err != nil {
			return nil, b, fmt.Errorf("parent: want a run ID")
		}
		pid := openapi_types.UUID(id)
		p.Parent, b.Parent = &pid, &pid
	}
	if len(f.Labels) > 0 {
		l := append([]string(nil), f.Labels...)
		p.Label, b.Label = &l, &l
	}
	return p, b, nil
}

// parseTime reads RFC 3339, or a datetime-local input's value (taken as UTC).
func parseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("bad time %q", s)
}

var runStatuses = []string{"pending", "running", "paused", "succeeded", "failed", "canceled"}

func (h *Handler) runsPage(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	// The label input holds space-separated pairs; the URL keeps one label= each.
	if len(q["label"]) == 1 && strings.Contains(strings.TrimSpace(q.Get("label")), " ") {
		q["label"] = strings.Fields(q.Get("label"))
	}
	f := filterOf(q)
	params, _, err := f.params()
	data := map[string]any{"Filter": f, "Statuses": runStatuses, "Query": f.query().Encode(), "Filtered": len(f.query()) > 0}
	data["Workflows"] = workflowNames(r, s, f.Workflow)
	if err != nil {
		data["Error"] = err.Error()
		h.renderStatus(w, r, s, "runs", http.StatusBadRequest, data)
		return
	}
	params.Limit = ptr(int64(h.cfg.PageSize))
	if c := q.Get("cursor"); c != "" {
		params.Cursor = &c
		data["Paged"] = true
	}
	res, err := s.api.ListRunsWithResponse(r.Context(), params)
	if err != nil {
		_, msg := problemText(err)
		data["Error"] = msg
		h.renderStatus(w, r, s, "runs", http.StatusBadRequest, data)
		return
	}
	data["Items"] = rowsOf(r, s, deref(res.JSON200.Items))
	if next := derefStr(res.JSON200.NextCursor); next != "" {
		nq := f.query()
		nq.Set("cursor", next)
		data["NextURL"] = "/ui/runs?" + nq.Encode()
	}
	h.render(w, r, s, "runs", data)
}

// runID reads the {id} of a path.
func runID(r *http.Request) (openapi_types.UUID, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	return openapi_types.UUID(id), err == nil
}

// fragment renders a part of a page (step.html, timeline.html) for the page to
// embed; empty when data is nil or the template fails (logged).
func (h *Handler) fragment(name string, s *session, data any) template.HTML {
	if v := reflect.ValueOf(data); !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
		return ""
	}
	var buf bytes.Buffer
	v := view{CSRF: s.csrf, CanOperate: s.canOperate(), LoggedIn: true, Data: data}
	if err := h.pages[name].ExecuteTemplate(&buf, name+".html", v); err != nil {
		h.logger.Error("render fragment", "fragment", name, "error", err)
		return ""
	}
	return template.HTML(buf.String()) //nolint:gosec // our own template's output, escaped by it
}

// runTimeline is the run's timeline alone, which the run page fetches again as
// the run's events come (its steps start and end).
func (h *Handler) runTimeline(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := runID(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	steps, err := s.api.ListStepsWithResponse(r.Context(), id)
	if err != nil {
		status, msg := problemText(err)
		http.Error(w, msg, status)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = io.WriteString(w, string(h.fragment("timeline", s, timelineOf(r, s, id, deref(steps.JSON200.Items)))))
}

// runEvents relays the run's event stream (GET /v1/runs/{id}/events/stream) to the
// browser, which has no bearer token (its session cookie is HttpOnly). The
// event: lines are dropped, so every event reaches EventSource.onmessage whatever
// its type (the type is in its data): types added later need no change here.
func (h *Handler) runEvents(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := runID(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	params := &client.StreamEventsParams{}
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		params.LastEventID = &last
	}
	resp, err := s.api.StreamEvents(r.Context(), id, params)
	if err != nil {
		status, msg := problemText(err)
		http.Error(w, msg, status)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "event:") {
			continue
		}
		if _, err := io.WriteString(w, line+"\n"); err != nil {
			return
		}
		if line == "" {
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// tail keeps the last n bytes of r.
func tail(r io.Reader, n int) (string, bool) {
	buf := make([]byte, 0, n)
	chunk := make([]byte, 32<<10)
	cut := false
	for {
		k, err := r.Read(chunk)
		buf = append(buf, chunk[:k]...)
		if len(buf) > n {
			buf = append(buf[:0], buf[len(buf)-n:]...)
			cut = true
		}
		if err != nil {
			break
		}
	}
	return strings.ToValidUTF8(string(buf), "�"), cut
}

func (h *Handler) stepPanel(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := runID(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	v, err := h.panel(r, s, id, r.PathValue("key"))
	if err != nil {
		status, msg := problemText(err)
		http.Error(w, msg, status)
		return
	}
	h.render(w, r, s, "step", v)
}

// stepOutput, stepCheckpoint and stepLog stream the API's bytes to the browser as
// downloads (never read whole: a blob may be large).
func (h *Handler) stepOutput(w http.ResponseWriter, r *http.Request, s *session) {
	stepDownload(w, r, "output", s.api.GetStepOutput)
}

func (h *Handler) stepCheckpoint(w http.ResponseWriter, r *http.Request, s *session) {
	stepDownload(w, r, "checkpoint", s.api.GetStepCheckpoint)
}

// stepDownload relays what get answers for the step the request names, as a
// download named <key>-<what>.
func stepDownload(w http.ResponseWriter, r *http.Request, what string,
	get func(ctx context.Context, id openapi_types.UUID, key string, reqEditors ...client.RequestEditorFn) (*http.Response, error)) {
	id, ok := runID(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	key := r.PathValue("key")
	resp, err := get(r.Context(), id, key)
	relay(w, resp, err, key+"-"+what)
}

func (h *Handler) stepLog(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := runID(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	key := r.PathValue("key")
	p := &client.GetAttemptLogParams{}
	if n, err := strconv.ParseInt(r.URL.Query().Get("attempt"), 10, 64); err == nil {
		p.Attempt = &n
	}
	if n, err := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64); err == nil {
		p.Offset = &n
	}
	resp, err := s.api.GetAttemptLog(r.Context(), id, key, p)
	if err == nil {
		// The live tail's position, for the panel's script that follows it.
		for _, h := range []string{"Cairn-Log-Offset", "Cairn-Log-Complete"} {
			if v := resp.Header.Get(h); v != "" {
				w.Header().Set(h, v)
			}
		}
		w.Header().Set("Cache-Control", "no-store")
	}
	relay(w, resp, err, key+".log")
}

func relay(w http.ResponseWriter, resp *http.Response, err error, name string) {
	if err != nil {
		status, msg := problemText(err)
		http.Error(w, msg, status)
		return
	}
	defer resp.Body.Close()
	ct := resp.Header.Get("Content-Type")
	if ct == "" || strings.HasPrefix(ct, "text/html") {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Disposition", `attachment; filename="`+strings.NewReplacer(`"`, "", "/", "_").Replace(name)+`"`)
	_, _ = io.Copy(w, resp.Body)
}

func (h *Handler) cancelRun(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := runID(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	_, err := s.api.CancelRunWithResponse(r.Context(), id, client.CancelRunRequest{Reason: optional(r.PostFormValue("reason"))})
	h.done(w, r, s, err, "/ui/runs/"+id.String(), "Run canceled.")
}

func (h *Handler) retryRun(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := runID(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	_, err := s.api.RetryRunWithResponse(r.Context(), id, &client.RetryRunParams{}, client.RetryRunBody{})
	next := "/ui/runs/" + id.String()
	if step := r.PostFormValue("step"); step != "" {
		next += "?step=" + url.QueryEscape(step)
	}
	h.done(w, r, s, err, next, "Run retried: its failed, canceled and skipped steps run again.")
}

func (h *Handler) pauseRun(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := runID(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	_, err := s.api.PauseRunWithResponse(r.Context(), id, client.ControlBody{Reason: optional(r.PostFormValue("reason"))})
	h.done(w, r, s, err, "/ui/runs/"+id.String(), "Run paused: no step starts until it is resumed (running attempts finish).")
}

func (h *Handler) resumeRun(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := runID(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	_, err := s.api.ResumeRunWithResponse(r.Context(), id, client.ControlBody{Reason: optional(r.PostFormValue("reason"))})
	h.done(w, r, s, err, "/ui/runs/"+id.String(), "Run resumed.")
}

func (h *Handler) rerunRun(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := runID(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	body := client.RerunRunBody{FromStep: r.PostFormValue("from_step")}
	if in := strings.TrimSpace(r.PostFormValue("input")); in != "" {
		var v any
		if err := json.Unmarshal([]byte(in), &v); err != nil {
			h.renderStatus(w, r, s, "error", http.StatusBadRequest, map[string]any{"Status": 400, "Message": "input is not JSON: " + err.Error()})
			return
		}
		body.Input = v
	}
	res, err := s.api.RerunRunWithResponse(r.Context(), id, &client.RerunRunParams{}, body)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	var rr *client.RerunResult
	if res.JSON202 != nil {
		rr = res.JSON202
	} else {
		rr = res.JSON200
	}
	if rr == nil || rr.Run == nil {
		h.after(w, r, s, nil, "/ui/runs/"+id.String())
		return
	}
	h.done(w, r, s, nil, "/ui/runs/"+rr.Run.Id, "Rerun started from step "+body.FromStep+".")
}

func ptr[T any](v T) *T { return &v }

func deref[T any](p *[]T) []T {
	if p == nil {
		return nil
	}
	return *p
}

func derefStr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func derefInt(n *int64) int64 {
	if n == nil {
		return 0
	}
	return *n
}

func optional(s string) *string {
	if s = strings.TrimSpace(s); s == "" {
		return nil
	}
	return &s
}

func shortID(id string) string {
	if len(id) > 13 {
		return id[len(id)-12:]
	}
	return id
}

func fmtTime(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return ""
		}
		return v.UTC().Format("2006-01-02 15:04:05Z")
	case *time.Time:
		if v == nil {
			return ""
		}
		return v.UTC().Format("2006-01-02 15:04:05Z")
	}
	return ""
}

func ago(t time.Time) string {
	return time.Since(t).Round(time.Second).String() + " ago"
}

func duration(a, b *time.Time) string {
	if a == nil {
		return ""
	}
	end := time.Now()
	if b != nil {
		end = *b
	}
	return end.Sub(*a).Round(time.Millisecond).String()
}

// pretty is v as indented JSON (the preview of an input, output or error).
func pretty(v any) string {
	if v == nil {
		return ""
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 64<<10 {
		return string(b[:64<<10]) + "\n… (cut at 64 KiB: download it whole)"
	}
	return string(b)
}

// prettyAll is v as indented JSON, whole (for a diff).
func prettyAll(v any) string {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// isBlob reports whether v is a {"$blob": …} reference (a large output kept in the
// blob store: the panel offers it as a download).
func isBlob(v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	_, ok := blobstore.ParseRef(b)
	return ok
}

// timeline is a Gantt-like view of the steps: one row per started step, from the
// time it was ready (light: waiting for a worker, a limit or a lease) to its start
// and from its start to its end (or now), on a common scale. Steps not started yet
// have no row; the run page fetches the view again as the run's events come.
type timelineView struct {
	Bars          []timelineBar
	Span          string
	Width, Height int
}

type timelineBar struct {
	Key, Name, Status, Label string
	WaitX, WaitW, X, W, Y    float64
	// Attempts: a step with more than one attempt is drawn as one segment per
	// attempt (the gaps between them are backoff), instead of X and W.
	Attempts []timelineSeg
}

type timelineSeg struct {
	Number int64
	Status string
	X, W   float64
}

// timelineAttemptSteps is the most steps of more than one attempt whose attempts
// the timeline fetches (one request each).
const timelineAttemptSteps = 50

// timelineOf fetches what the timeline draws: the steps, and the attempts of the
// steps that had more than one.
func timelineOf(r *http.Request, s *session, id openapi_types.UUID, steps []client.Step) *timelineView {
	attempts := map[string][]client.Attempt{}
	for _, st := range steps {
		if st.Attempts <= 1 || st.StartedAt == nil || len(attempts) >= timelineAttemptSteps {
			continue
		}
		if at, err := s.api.ListAttemptsWithResponse(r.Context(), id, st.Key); err == nil {
			attempts[st.Key] = deref(at.JSON200.Items)
		}
	}
	return timeline(steps, attempts, time.Now())
}

// timelineMax is the most rows the timeline draws.
const timelineMax = 500

func timeline(steps []client.Step, attempts map[string][]client.Attempt, now time.Time) *timelineView {
	var first, last time.Time
	started := make([]client.Step, 0, len(steps))
	for _, st := range steps {
		if st.StartedAt == nil {
			continue
		}
		started = append(started, st)
		end := now
		if st.FinishedAt != nil {
			end = *st.FinishedAt
		}
		begin := *st.StartedAt
		if st.ReadyAt != nil && st.ReadyAt.Before(begin) {
			begin = *st.ReadyAt
		}
		if first.IsZero() || begin.Before(first) {
			first = begin
		}
		if end.After(last) {
			last = end
		}
	}
	if len(started) == 0 || len(started) > timelineMax {
		return nil // nothing yet, or too many bars to read
	}
	sort.SliceStable(started, func(i, j int) bool { return started[i].StartedAt.Before(*started[j].StartedAt) })
	span := last.Sub(first)
	if span <= 0 {
		span = time.Millisecond
	}
	const width = 600.0
	scale := func(d time.Duration) float64 { return float64(d) / float64(span) * width }
	tv := &timelineView{Span: span.Round(time.Millisecond).String(), Width: int(width) + 200, Height: len(started)*18 + 4}
	for i, st := range started {
		end := now
		if st.FinishedAt != nil {
			end = *st.FinishedAt
		}
		b := timelineBar{Key: st.Key, Name: st.Key, Status: string(st.Status), Y: float64(i * 18),
			X: scale(st.StartedAt.Sub(first)), W: max(2, scale(end.Sub(*st.StartedAt)))}
		if len([]rune(b.Name)) > 28 {
			b.Name = string([]rune(b.Name)[:27]) + "…"
		}
		b.Label = "ran " + end.Sub(*st.StartedAt).Round(time.Millisecond).String()
		if st.ReadyAt != nil && st.ReadyAt.Before(*st.StartedAt) {
			b.WaitX, b.WaitW = scale(st.ReadyAt.Sub(first)), scale(st.StartedAt.Sub(*st.ReadyAt))
			b.Label = "waited " + st.StartedAt.Sub(*st.ReadyAt).Round(time.Millisecond).String() + ", " + b.Label
		}
		if st.Attempts > 1 {
			b.Label += fmt.Sprintf(" (%d attempts)", st.Attempts)
		}
		for _, a := range attempts[st.Key] {
			if a.StartedAt.Before(first) {
				continue // an attempt of before a retry: off this scale
			}
			aend := now
			if a.FinishedAt != nil {
				aend = *a.FinishedAt
			}
			b.Attempts = append(b.Attempts, timelineSeg{Number: a.Number, Status: string(a.Status),
				X: scale(a.StartedAt.Sub(first)), W: max(2, scale(aend.Sub(a.StartedAt)))})
		}
		tv.Bars = append(tv.Bars, b)
	}
	return tv
}

// badInput answers a form whose JSON field does not parse.
func (h *Handler) badInput(w http.ResponseWriter, r *http.Request, s *session, field string, err error) {
	h.renderStatus(w, r, s, "error", http.StatusBadRequest, map[string]any{"Status": 400, "Message": field + " is not JSON: " + err.Error()})
}

// signalRun sends a signal (a name and a JSON payload) to the run.
func (h *Handler) signalRun(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := runID(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	name := strings.TrimSpace(r.PostFormValue("name"))
	var payload any
	if in := strings.TrimSpace(r.PostFormValue("payload")); in != "" {
		if err := json.Unmarshal([]byte(in), &payload); err != nil {
			h.badInput(w, r, s, "the payload", err)
			return
		}
	}
	_, err := s.api.SendSignalWithResponse(r.Context(), id, name, &client.SendSignalParams{}, payload)
	h.done(w, r, s, err, "/ui/runs/"+id.String(), "Signal "+name+" sent.")
}

// decideStep approves or rejects an approval step, with a comment.
func (h *Handler) decideStep(w http.ResponseWriter, r *http.Request, s *session) {
	id, ok := runID(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	key := r.PathValue("key")
	body := client.DecisionBody{Comment: optional(r.PostFormValue("comment"))}
	var err error
	switch r.PostFormValue("decision") {
	case "approve":
		_, err = s.api.ApproveStepWithResponse(r.Context(), id, key, body)
	case "reject":
		_, err = s.api.RejectStepWithResponse(r.Context(), id, key, body)
	default:
		h.renderStatus(w, r, s, "error", http.StatusBadRequest, map[string]any{"Status": 400, "Message": "decision: want approve or reject"})
		return
	}
	h.done(w, r, s, err, "/ui/runs/"+id.String()+"?step="+url.QueryEscape(key), "Step "+key+": "+r.PostFormValue("decision")+" recorded.")
}

func (h *Handler) schedulesPage(w http.ResponseWriter, r *http.Request, s *session) {
	params := &client.ListSchedulesParams{Limit: ptr(int64(100))}
	if c := r.URL.Query().Get("cursor"); c != "" {
		params.Cursor = &c
	}
	if wf := r.URL.Query().Get("workflow"); wf != "" {
		params.Workflow = &wf
	}
	res, err := s.api.ListSchedulesWithResponse(r.Context(), params)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	h.render(w, r, s, "schedules", map[string]any{"Items": deref(res.JSON200.Items), "Next": derefStr(res.JSON200.NextCursor)})
}

// scheduleAction pauses, resumes or triggers a schedule; a trigger leads to its run.
func (h *Handler) scheduleAction(w http.ResponseWriter, r *http.Request, s *session) {
	sid, err := strconv.ParseInt(r.PathValue("sid"), 10, 64)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	ctx := r.Context()
	switch r.PathValue("action") {
	case "pause":
		_, err = s.api.PauseScheduleWithResponse(ctx, sid)
	case "resume":
		_, err = s.api.ResumeScheduleWithResponse(ctx, sid)
	case "trigger":
		res, err := s.api.TriggerScheduleWithResponse(ctx, sid)
		if err == nil && res.JSON202 != nil {
			h.done(w, r, s, nil, "/ui/runs/"+res.JSON202.Id, "Schedule triggered: this is its run.")
			return
		}
		h.after(w, r, s, err, "/ui/schedules")
		return
	default:
		http.NotFound(w, r)
		return
	}
	h.done(w, r, s, err, "/ui/schedules", "Schedule "+r.PathValue("action")+"d.")
}

// namespaceChoices lists the namespaces a session of every namespace may show:
// the first page of them (a hundred), and the one it shows; none when the list
// fails (the header then names the one shown).
func (h *Handler) namespaceChoices(ctx context.Context, s *session) []string {
	limit := int64(100)
	resp, err := s.api.ListNamespacesWithResponse(ctx, &client.ListNamespacesParams{Limit: &limit})
	if err != nil || resp.JSON200 == nil {
		return nil
	}
	var out []string
	for _, n := range deref(resp.JSON200.Items) {
		out = append(out, n.Name)
	}
	if !slices.Contains(out, s.ns) {
		out = append(out, s.ns)
	}
	if len(out) == 1 && out[0] == namespace.Default {
		return nil // nothing to choose: the header stays as it was before namespaces
	}
	return out
}
