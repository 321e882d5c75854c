package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/namespace"
)

// Step is a step of a run.
type Step struct {
	Key            string          `json:"key"`
	Status         string          `json:"status" enum:"waiting,ready,running,suspended,succeeded,failed,canceled,skipped"`
	Needs          []string        `json:"needs"`
	Attempts       int             `json:"attempts" doc:"attempts so far"`
	MaxAttempts    int             `json:"max_attempts"`
	ReadyAt        *time.Time      `json:"ready_at" doc:"when the step became (or becomes) claimable"`
	LeaseOwner     *string         `json:"lease_owner" doc:"dispatcher holding the step while it runs"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at"`
	LastError      json.RawMessage `json:"last_error" doc:"error of the latest failed attempt"`
	Output         json.RawMessage `json:"output" doc:"inline value, or a {\"$blob\": {...}} reference"`
	Checkpoint     json.RawMessage `json:"checkpoint" doc:"newest checkpoint, inline or a $blob reference"`
	StartedAt      *time.Time      `json:"started_at"`
	FinishedAt     *time.Time      `json:"finished_at"`
	Priority       int             `json:"priority" doc:"0..9, higher first: ready steps are claimed by priority, then age"`
	BlockedBy      *BlockedBy      `json:"blocked_by,omitempty" doc:"why an unfinished step does not start (its next attempt, for a running step); absent when nothing blocks it"`
	WaitingFor     *WaitingFor     `json:"waiting_for,omitempty" doc:"what a waiting or suspended step waits for; absent otherwise"`
	TriggerRule    string          `json:"trigger_rule" enum:"all_succeeded,all_done,none_failed,any_failed" doc:"when the step runs, given how the steps it needs ended (after: in the manifest)"`
	Condition      string          `json:"condition,omitempty" enum:"pending,true,false,error" doc:"the state of the step's when: pending until it is decided (once, when the step is ready); absent when it has none"`
	SkipReason     string          `json:"skip_reason,omitempty" enum:"condition_false,upstream_failed,upstream_skipped,no_upstream_failed" doc:"why a skipped step was skipped: its when was false, a step it needs failed or was skipped (its trigger rule can no longer hold), or none failed (after: any_failed)"`
	Phase          string          `json:"phase" enum:"main,compensate,on_failure" doc:"main: a step of the workflow; compensate and on_failure: a failure handler, run while the run is compensating"`
	Compensates    string          `json:"compensates,omitempty" doc:"the step a compensate step undoes"`
	Map            *MapProgress    `json:"map,omitempty" doc:"a map step that has started: where its instances stand (GET …/items lists them)"`
}

// WaitingFor says what an unfinished step waits for: its upstream steps (a waiting
// step), or the end of a durable wait (a suspended step: sleep, signal, approval,
// callback, child run).
type WaitingFor struct {
	Kind      string     `json:"kind" enum:"upstream,sleep,signal,approval,callback,child_run,map,event" doc:"upstream: steps it needs have not finished (see needs); the others: a suspended step's wait (child_run: a workflow step's child run, run_id; map: a map step's instances, see map; event: a wait_for_event step, name)"`
	Until     *time.Time `json:"until,omitempty" doc:"a sleep's end"`
	Name      string     `json:"name,omitempty" doc:"the signal's name (POST /v1/runs/{id}/signals/{name}), or the event's (POST /v1/events)"`
	RunID     string     `json:"run_id,omitempty" format:"uuid" doc:"the child run a workflow step waits for"`
	Since     *time.Time `json:"since,omitempty" doc:"when the wait began"`
	TimeoutAt *time.Time `json:"timeout_at,omitempty" doc:"when the wait gives up"`
	OnTimeout string     `json:"on_timeout,omitempty" enum:"fail,continue" doc:"what happens then: fail (code timeout) or continue (succeeds with a null output)"`
	Required  *int       `json:"required,omitempty" doc:"an approval: how many distinct approvers must approve"`
	Approvals *int       `json:"approvals,omitempty" doc:"an approval: how many have approved so far"`
}

// waitingFor explains a waiting or suspended step.
func waitingFor(st *catalog.Step) *WaitingFor {
	switch st.Status {
	case catalog.StepWaiting:
		return &WaitingFor{Kind: "upstream", Since: utc(&st.CreatedAt)}
	case catalog.StepSuspended:
		w := &WaitingFor{Since: utc(st.WaitingSince), Until: utc(st.WaitUntil), TimeoutAt: utc(st.TimeoutAt)}
		if st.WaitKind != nil {
			w.Kind = string(*st.WaitKind)
		}
		if st.WaitName != nil {
			w.Name = namespace.Strip(*st.WaitName)
		}
		if st.ApprovalRequired != nil && st.WaitKind != nil && *st.WaitKind == catalog.WaitApproval {
			n := st.Approvals
			w.Required, w.Approvals = st.ApprovalRequired, &n
		}
		if st.ChildRun != nil {
			w.RunID = st.ChildRun.String()
		}
		if st.OnTimeout != nil && st.TimeoutAt != nil {
			w.OnTimeout = string(*st.OnTimeout)
		}
		return w
	}
	return nil
}

// BlockedBy says what keeps an unfinished step from starting: the run is paused, or
// (a ready step) its concurrency key has no free slot or its rate limit no token
// (name, key, in_use and limit say which). no_dispatcher comes with placement.
type BlockedBy struct {
	Kind   string   `json:"kind" enum:"paused,concurrency,quota,rate_limit,no_dispatcher" doc:"paused: the run is paused (GET /v1/runs/{id} says why); concurrency: every slot of the step's concurrency key is in use (GET /v1/limits); quota: the namespace runs as many steps as its running_steps quota allows (name running_steps, key the namespace; GET /v1/namespaces/{namespace}/quotas); rate_limit: the key's bucket has no token left (in_use: tokens used); no_dispatcher: no live dispatcher has every tag of runs_on (cairn serve --tags)"`
	RunsOn []string `json:"runs_on,omitempty" doc:"no_dispatcher: the step's runs_on"`
	Name   string   `json:"name,omitempty" doc:"the limit's name"`
	Key    string   `json:"key,omitempty" doc:"the limit's key"`
	InUse  *int     `json:"in_use,omitempty" doc:"slots or tokens in use"`
	Limit  *int     `json:"limit,omitempty" doc:"the limit"`
}

// explainBlocked fills blocked_by of the ready steps (not held) that a limit, a
// quota or their runs_on holds back (catalog.StepsBlocked).
func (s *Server) explainBlocked(ctx context.Context, id uuid.UUID, rows []catalog.Step, items []Step) error {
	ready := false
	for i := range rows {
		ready = ready || (rows[i].Status == catalog.StepReady && !rows[i].Held)
	}
	if !ready {
		return nil
	}
	blocked, err := s.store.StepsBlocked(ctx, id)
	if err != nil {
		return err
	}
	for i := range items {
		if b, ok := blocked[items[i].Key]; ok && items[i].BlockedBy == nil {
			inUse, limit := b.InUse, b.Limit
			items[i].BlockedBy = &BlockedBy{Kind: b.Kind, Name: namespace.Strip(b.Name), Key: b.Key, RunsOn: b.RunsOn}
			if b.Kind != "no_dispatcher" {
				items[i].BlockedBy.InUse, items[i].BlockedBy.Limit = &inUse, &limit
			}
		}
	}
	return nil
}

func stepOf(st *catalog.Step) Step {
	out := Step{
		Key: st.Key, Status: string(st.Status), Needs: []string(st.Needs), Attempts: st.Attempts, MaxAttempts: st.MaxAttempts,
		ReadyAt:        utc(st.ReadyAt),
		LeaseExpiresAt: utc(st.LeaseExpiresAt),
		LastError:      jsonOrNull(st.LastError), Output: jsonOrNull(st.Output), Checkpoint: jsonOrNull(st.Checkpoint),
		StartedAt: utc(st.StartedAt), FinishedAt: utc(st.FinishedAt), Priority: st.Priority,
	}
	if out.Needs == nil {
		out.Needs = []string{}
	}
	out.LeaseOwner = st.LeaseOwner
	if st.Held && !st.Status.Terminal() {
		out.BlockedBy = &BlockedBy{Kind: "paused"}
	}
	out.WaitingFor = waitingFor(st)
	out.TriggerRule, out.Phase = string(st.TriggerRule), string(st.Phase)
	if st.Condition != nil {
		out.Condition = string(*st.Condition)
	}
	if st.SkipReason != nil {
		out.SkipReason = string(*st.SkipReason)
	}
	if st.Compensates != nil {
		out.Compensates = *st.Compensates
	}
	return out
}

// Attempt is one try of a step.
type Attempt struct {
	Number     int             `json:"number"`
	Status     string          `json:"status" enum:"running,succeeded,failed,timed_out,interrupted,canceled"`
	Dispatcher string          `json:"dispatcher" doc:"dispatcher that ran it"`
	LeaseToken int64           `json:"lease_token" doc:"fencing token of its lease"`
	Counted    bool            `json:"counted" doc:"false for attempts handed back at shutdown: they do not use up max_attempts"`
	Error      json.RawMessage `json:"error"`
	HasLog     bool            `json:"has_log" doc:"a log is stored (GET …/logs?attempt=N)"`
	StartedAt  time.Time       `json:"started_at"`
	FinishedAt *time.Time      `json:"finished_at"`
}

func attemptOf(a *catalog.Attempt) Attempt {
	return Attempt{Number: a.Number, Status: string(a.Status), Dispatcher: a.Dispatcher, LeaseToken: a.LeaseToken,
		Counted: a.Counted, Error: jsonOrNull(a.Error), HasLog: a.LogKey != nil, StartedAt: a.StartedAt.UTC(),
		FinishedAt: utc(a.FinishedAt)}
}

// StepParams are the {id} and {key} path parameters of a step.
type StepParams struct {
	RunIDParam
	Key string `path:"key" pattern:"^[a-z0-9][a-z0-9_-]{0,62}(\\[[0-9]{1,12}\\])?$" doc:"step key; a map instance is <key>[<index>] (escaped in a URL: %5B, %5D)"`
}

type itemsOutput[T any] struct {
	Body struct {
		Items []T `json:"items"`
	}
}

// itemsOf converts catalog rows to a response body.
func itemsOf[R, T any](rows []R, conv func(*R) T) *itemsOutput[T] {
	out := &itemsOutput[T]{}
	out.Body.Items = make([]T, len(rows))
	for i := range rows {
		out.Body.Items[i] = conv(&rows[i])
	}
	return out
}

func (s *Server) registerSteps() {
	register(s, huma.Operation{
		OperationID: "listSteps",
		Method:      http.MethodGet,
		Path:        "/v1/runs/{id}/steps",
		Summary:     "List a run's steps",
		Description: "Every step with its state, attempts, readiness, lease and last error: why a run is (not) moving.",
		Tags:        []string{"runs"},
	}, RoleViewer, []problemClass{classBadRequest, classNotFound}, func(ctx context.Context, in *RunIDParam) (*itemsOutput[Step], error) {
		id, err := in.uuid()
		if err != nil {
			return nil, err
		}
		rows, err := s.store.StepList(ctx, id)
		if err != nil {
			return nil, err
		}
		if len(rows) == 0 {
			if _, err := s.store.RunGet(ctx, id); err != nil {
				return nil, err
			}
		}
		maps, err := s.store.MapProgressList(ctx, id)
		if err != nil {
			return nil, err
		}
		out := itemsOf(rows, stepOf)
		for i := range out.Body.Items {
			if m, ok := maps[out.Body.Items[i].Key]; ok {
				out.Body.Items[i].Map = mapProgressOf(m)
			}
		}
		if err := s.explainBlocked(ctx, id, rows, out.Body.Items); err != nil {
			return nil, err
		}
		return out, nil
	})

	register(s, huma.Operation{
		OperationID: "listAttempts",
		Method:      http.MethodGet,
		Path:        "/v1/runs/{id}/steps/{key}/attempts",
		Summary:     "List a step's attempts",
		Tags:        []string{"runs"},
	}, RoleViewer, []problemClass{classBadRequest, classNotFound}, s.stepAttempts)

	register(s, huma.Operation{
		OperationID: "getStepOutput",
		Method:      http.MethodGet,
		Path:        "/v1/runs/{id}/steps/{key}/output",
		Summary:     "Download a step's output",
		Description: "The output's bytes, streamed from the blob store for large outputs, with their length and content type. 404 until the step has succeeded.",
		Tags:        []string{"runs"},
		Responses: map[string]*huma.Response{"200": {Description: "The output bytes", Content: map[string]*huma.MediaType{
			"application/octet-stream": {Schema: &huma.Schema{Type: "string", Format: "binary"}},
			"application/json":         {Schema: &huma.Schema{}},
		}}},
	}, RoleViewer, []problemClass{classBadRequest, classNotFound}, s.stepOutput)

	register(s, huma.Operation{
		OperationID: "getStepCheckpoint",
		Method:      http.MethodGet,
		Path:        "/v1/runs/{id}/steps/{key}/checkpoint",
		Summary:     "Download a step's checkpoint",
		Description: "The step's newest checkpoint: inline JSON, or the bytes of the blob it is kept in, streamed with their length and content type. 404 when the step has none.",
		Tags:        []string{"runs"},
		Responses: map[string]*huma.Response{"200": {Description: "The checkpoint bytes", Content: map[string]*huma.MediaType{
			"application/octet-stream": {Schema: &huma.Schema{Type: "string", Format: "binary"}},
			"application/json":         {Schema: &huma.Schema{}},
		}}},
	}, RoleViewer, []problemClass{classBadRequest, classNotFound}, s.stepCheckpoint)

	register(s, huma.Operation{
		OperationID: "getAttemptLog",
		Method:      http.MethodGet,
		Path:        "/v1/runs/{id}/steps/{key}/logs",
		Summary:     "Download an attempt's log",
		Description: "The attempt's log (stderr of exec handlers), masked. The newest attempt unless ?attempt=N. " +
			"While the attempt runs, its live tail: what the dispatcher has published so far (about once a second; the last MiB at most). " +
			"With ?offset=N, the bytes from offset N on. Follow a running attempt by polling: read from offset Cairn-Log-Offset plus the body's length next, " +
			"until Cairn-Log-Complete is true (the attempt has ended and its whole log is stored; the stored log has the same bytes at the same offsets). " +
			"Cairn-Log-Offset is later than the offset asked for when the bytes there are no longer kept.",
		Tags: []string{"runs"},
		Responses: map[string]*huma.Response{"200": {Description: "The log", Content: map[string]*huma.MediaType{
			"text/plain": {Schema: &huma.Schema{Type: "string"}},
		}, Headers: map[string]*huma.Param{
			"Cairn-Log-Offset":   {Description: "the offset of the body's first byte in the attempt's log", Schema: &huma.Schema{Type: "integer", Format: "int64"}},
			"Cairn-Log-Complete": {Description: "true once the attempt has ended: nothing will follow what was read", Schema: &huma.Schema{Type: "boolean"}},
		}}},
	}, RoleViewer, []problemClass{classBadRequest, classNotFound}, func(ctx context.Context, in *struct {
		StepParams
		Attempt int   `query:"attempt" minimum:"0" maximum:"2147483647" doc:"attempt number; the newest when 0 or absent"`
		Offset  int64 `query:"offset" minimum:"0" doc:"byte offset to read from (0: the start)"`
	}) (*huma.StreamResponse, error) {
		return s.stepLog(ctx, &in.StepParams, in.Attempt, in.Offset)
	})
	s.registerItems()
}

// stepAttempts lists the attempts of the step p names.
func (s *Server) stepAttempts(ctx context.Context, p *StepParams) (*itemsOutput[Attempt], error) {
	st, err := s.step(ctx, p)
	if err != nil {
		return nil, err
	}
	rows, err := s.store.AttemptList(ctx, st.RunID, st.Key)
	if err != nil {
		return nil, err
	}
	return itemsOf(rows, attemptOf), nil
}

// stepOutput streams the output of the step p names; 404 until it has succeeded.
func (s *Server) stepOutput(ctx context.Context, p *StepParams) (*huma.StreamResponse, error) {
	st, err := s.step(ctx, p)
	if err != nil {
		return nil, err
	}
	if st.Status != catalog.StepSucceeded {
		return nil, withDetail(errNotFound, "the step has no output: it is %s", st.Status)
	}
	return s.streamPayload(ctx, json.RawMessage(st.Output))
}

// stepCheckpoint streams the checkpoint of the step p names; 404 when it has none.
func (s *Server) stepCheckpoint(ctx context.Context, p *StepParams) (*huma.StreamResponse, error) {
	st, err := s.step(ctx, p)
	if err != nil {
		return nil, err
	}
	if len(st.Checkpoint) == 0 || string(st.Checkpoint) == "null" {
		return nil, withDetail(errNotFound, "the step has no checkpoint")
	}
	return s.streamPayload(ctx, json.RawMessage(st.Checkpoint))
}

// stepLog streams the log of attempt n (the newest when 0) of the step p names,
// from offset: the stored log once the attempt has ended, else its live tail.
func (s *Server) stepLog(ctx context.Context, p *StepParams, n int, offset int64) (*huma.StreamResponse, error) {
	st, err := s.step(ctx, p)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		n = st.Attempts
	}
	if n == 0 {
		return nil, withDetail(errNotFound, "the step has not run yet")
	}
	a, err := s.store.AttemptGet(ctx, st.RunID, st.Key, n)
	if err != nil {
		return nil, err
	}
	complete := a.Status != catalog.AttemptRunning
	if a.LogKey != nil {
		rc, obj, err := s.blobs.Get(ctx, *a.LogKey, blobstore.GetOptions{Offset: offset})
		if errors.Is(err, blobstore.ErrInvalidRange) {
			return logBody(offset, nil, true), nil // past the end: nothing more
		}
		if err != nil {
			return nil, err
		}
		return &huma.StreamResponse{Body: func(hc huma.Context) {
			defer rc.Close()
			setLogHeaders(hc, offset, obj.Size-offset, true)
			if _, err := io.Copy(hc.BodyWriter(), rc); err != nil {
				s.logger.WarnContext(hc.Context(), "stream log", "key", *a.LogKey, "error", err, "request_id", RequestID(hc.Context()))
			}
		}}, nil
	}
	live, err := s.store.LogChunkRead(ctx, st.RunID, st.Key, n, offset)
	if err != nil {
		return nil, err
	}
	return logBody(live.Offset, live.Data, complete), nil
}

func logBody(offset int64, data []byte, complete bool) *huma.StreamResponse {
	return &huma.StreamResponse{Body: func(hc huma.Context) {
		setLogHeaders(hc, offset, int64(len(data)), complete)
		_, _ = hc.BodyWriter().Write(data)
	}}
}

func setLogHeaders(hc huma.Context, offset, length int64, complete bool) {
	hc.SetHeader("Content-Type", "text/plain; charset=utf-8")
	hc.SetHeader("Content-Length", strconv.FormatInt(length, 10))
	hc.SetHeader("Cache-Control", "no-store")
	hc.SetHeader("Cairn-Log-Offset", strconv.FormatInt(offset, 10))
	hc.SetHeader("Cairn-Log-Complete", strconv.FormatBool(complete))
	hc.SetStatus(http.StatusOK)
}

// step looks up the step a request names: 400 for a malformed run ID, 404 when
// the run or the step does not exist.
func (s *Server) step(ctx context.Context, p *StepParams) (*catalog.Step, error) {
	id, err := p.uuid()
	if err != nil {
		return nil, err
	}
	return s.store.StepGet(ctx, id, p.Key)
}

// streamPayload writes a stored payload: an inline JSON value, or the bytes of the
// blob a $blob reference names.
func (s *Server) streamPayload(ctx context.Context, v json.RawMessage) (*huma.StreamResponse, error) {
	if ref, ok := blobstore.ParseRef(v); ok {
		key, err := ref.Key()
		if err != nil {
			return nil, err
		}
		return s.streamBlob(ctx, key, ref.Digest)
	}
	body := jsonOrNull(v)
	return &huma.StreamResponse{Body: func(hc huma.Context) {
		hc.SetHeader("Content-Type", "application/json")
		hc.SetHeader("Content-Length", strconv.Itoa(len(body)))
		hc.SetStatus(http.StatusOK)
		_, _ = hc.BodyWriter().Write(body)
	}}, nil
}

// streamBlob streams an object with its length, content type and sha256 (sum
// when the store does not know it: an object under a key of its own, whose
// reference holds its digest). The object is opened before the status is
// written, so a missing object is still a 404.
func (s *Server) streamBlob(ctx context.Context, key, sum string) (*huma.StreamResponse, error) {
	rc, obj, err := s.blobs.Get(ctx, key, blobstore.GetOptions{})
	if err != nil {
		return nil, err
	}
	return &huma.StreamResponse{Body: func(hc huma.Context) {
		defer rc.Close()
		ct := obj.ContentType
		if ct == "" {
			ct = "application/octet-stream"
		}
		hc.SetHeader("Content-Type", ct)
		hc.SetHeader("Content-Length", strconv.FormatInt(obj.Size, 10))
		hc.SetHeader("Cairn-Content-Sha256", cmp.Or(obj.SHA256, sum))
		hc.SetStatus(http.StatusOK)
		if _, err := io.Copy(hc.BodyWriter(), rc); err != nil {
			s.logger.WarnContext(hc.Context(), "stream blob", "key", key, "error", err, "request_id", RequestID(hc.Context()))
		}
	}}, nil
}
