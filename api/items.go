package api

import (
	"context"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
)

// Map instances (docs/api-endpoints.md, "Map instances"): a map step's instances
// are steps keyed "key[index]"; these operations page through them and reach each
// one's output, logs and attempts by index.

// MapProgress is where a map step's instances stand.
type MapProgress struct {
	Created   int64  `json:"created" doc:"instances created so far (items read)"`
	Total     *int64 `json:"total" doc:"the item count, once every item has its instance; null before"`
	Succeeded int64  `json:"succeeded"`
	Failed    int64  `json:"failed" doc:"failed, canceled or skipped instances"`
	Running   int64  `json:"running"`
}

func mapProgressOf(m catalog.MapProgress) *MapProgress {
	out := &MapProgress{Created: m.Created, Succeeded: m.Succeeded, Failed: m.Failed, Running: m.Running}
	if m.Expanded {
		total := m.Created
		out.Total = &total
	}
	return out
}

// Item is one instance of a map step.
type Item struct {
	Index      int64      `json:"index" doc:"the item's index in the list, from 0"`
	Key        string     `json:"key" doc:"the instance's step key: <map key>[<index>]"`
	Status     string     `json:"status" enum:"waiting,ready,running,suspended,succeeded,failed,canceled,skipped"`
	Attempts   int        `json:"attempts"`
	Item       any        `json:"item" doc:"the item, as it was in the list"`
	Output     any        `json:"output" doc:"inline value, or a {\"$blob\": {...}} reference"`
	LastError  any        `json:"last_error"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

func itemOf(st *catalog.Step) Item {
	it := Item{Key: st.Key, Status: string(st.Status), Attempts: st.Attempts,
		Item: jsonOrNull(st.MapItem), Output: jsonOrNull(st.Output), LastError: jsonOrNull(st.LastError),
		StartedAt: utc(st.StartedAt), FinishedAt: utc(st.FinishedAt)}
	if st.MapIndex != nil {
		it.Index = *st.MapIndex
	}
	return it
}

// ItemParams name one instance of a map step.
type ItemParams struct {
	StepParams
	Index int64 `path:"index" minimum:"0" maximum:"999999999999" doc:"the item's index, from 0"`
}

// stepParams are the instance's own step parameters.
func (p *ItemParams) stepParams() *StepParams {
	return &StepParams{RunIDParam: p.RunIDParam, Key: bundle.InstanceKey(p.Key, p.Index)}
}

type itemListOutput struct {
	Body struct {
		Items []Item `json:"items"`
		// NextAfter is the after of the next page; absent on the last.
		NextAfter *int64 `json:"next_after,omitempty" doc:"pass as after for the next page; absent on the last page"`
	}
}

func (s *Server) registerItems() {
	register(s, huma.Operation{
		OperationID: "listItems",
		Method:      http.MethodGet,
		Path:        "/v1/runs/{id}/steps/{key}/items",
		Summary:     "List a map step's instances",
		Description: "A page of the instances of a map step, by index, each with its item, state, attempts, output and last error; ?status= keeps those in one state. Pages follow next_after.",
		Tags:        []string{"runs"},
	}, RoleViewer, []problemClass{classBadRequest, classNotFound}, func(ctx context.Context, in *struct {
		StepParams
		Status string `query:"status" enum:"waiting,ready,running,suspended,succeeded,failed,canceled,skipped" doc:"only instances in this state"`
		After  int64  `query:"after" minimum:"-1" maximum:"999999999999" default:"-1" doc:"the page starts after this index"`
		Limit  int    `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"instances per page"`
	}) (*itemListOutput, error) {
		st, err := s.step(ctx, &in.StepParams)
		if err != nil {
			return nil, err
		}
		rows, err := s.store.MapItemList(ctx, &catalog.MapItemListParams{RunID: st.RunID, Key: st.Key,
			Status: catalog.StepStatus(in.Status), After: in.After, Limit: in.Limit + 1})
		if err != nil {
			return nil, err
		}
		out := &itemListOutput{}
		more := len(rows) > in.Limit
		if more {
			rows = rows[:in.Limit]
		}
		out.Body.Items = make([]Item, len(rows))
		for i := range rows {
			out.Body.Items[i] = itemOf(&rows[i])
		}
		if more {
			next := out.Body.Items[len(rows)-1].Index
			out.Body.NextAfter = &next
		}
		return out, nil
	})

	register(s, huma.Operation{
		OperationID: "listItemAttempts",
		Method:      http.MethodGet,
		Path:        "/v1/runs/{id}/steps/{key}/items/{index}/attempts",
		Summary:     "List a map instance's attempts",
		Tags:        []string{"runs"},
	}, RoleViewer, []problemClass{classBadRequest, classNotFound}, func(ctx context.Context, in *ItemParams) (*itemsOutput[Attempt], error) {
		return s.stepAttempts(ctx, in.stepParams())
	})

	register(s, huma.Operation{
		OperationID: "getItemOutput",
		Method:      http.MethodGet,
		Path:        "/v1/runs/{id}/steps/{key}/items/{index}/output",
		Summary:     "Download a map instance's output",
		Description: "As GET …/steps/{key}/output, for one instance. 404 until it has succeeded.",
		Tags:        []string{"runs"},
		Responses: map[string]*huma.Response{"200": {Description: "The output bytes", Content: map[string]*huma.MediaType{
			"application/octet-stream": {Schema: &huma.Schema{Type: "string", Format: "binary"}},
			"application/json":         {Schema: &huma.Schema{}},
		}}},
	}, RoleViewer, []problemClass{classBadRequest, classNotFound}, func(ctx context.Context, in *ItemParams) (*huma.StreamResponse, error) {
		return s.stepOutput(ctx, in.stepParams())
	})

	register(s, huma.Operation{
		OperationID: "getItemLog",
		Method:      http.MethodGet,
		Path:        "/v1/runs/{id}/steps/{key}/items/{index}/logs",
		Summary:     "Download a map instance's attempt log",
		Description: "As GET …/steps/{key}/logs, for one instance: the newest attempt unless ?attempt=N; the live tail while it runs, from ?offset=N.",
		Tags:        []string{"runs"},
		Responses: map[string]*huma.Response{"200": {Description: "The log", Content: map[string]*huma.MediaType{
			"text/plain": {Schema: &huma.Schema{Type: "string"}},
		}}},
	}, RoleViewer, []problemClass{classBadRequest, classNotFound}, func(ctx context.Context, in *struct {
		ItemParams
		Attempt int   `query:"attempt" minimum:"0" maximum:"2147483647" doc:"attempt number; the newest when 0 or absent"`
		Offset  int64 `query:"offset" minimum:"0" doc:"byte offset to read from (0: the start)"`
	}) (*huma.StreamResponse, error) {
		return s.stepLog(ctx, in.stepParams(), in.Attempt, in.Offset)
	})
}
