package api

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/namespace"
)

// LimitKey is the use of one key of a concurrency limit.
type LimitKey struct {
	Name    string `json:"name" doc:"the limit's name (concurrency.name; default the workflow's name)"`
	Key     string `json:"key" doc:"the key, the value of concurrency.key for the step's run (empty: one key for the whole limit)"`
	Running int    `json:"running" doc:"slots in use: the steps of the key running now"`
	Ready   int    `json:"ready" doc:"steps of the key ready to start: waiting for a slot, or about to be claimed"`
	Limit   int    `json:"limit" doc:"the limit in force: the one set by PUT /v1/limits/{name} if any, else the steps' own"`
}

// LimitOverride is a limit set at run time.
type LimitOverride struct {
	Name        string    `json:"name"`
	Concurrency *int      `json:"concurrency,omitempty" doc:"slots per key, for every step whose concurrency names the limit (absent: the steps' own)"`
	RateLimit   *RateSpec `json:"rate_limit,omitempty" doc:"starts per window, for every step whose rate_limit names the limit (absent: the steps' own)"`
	UpdatedAt   time.Time `json:"updated_at"`
	UpdatedBy   string    `json:"updated_by" doc:"the name of the token that set it"`
}

// RateSpec is a rate limit: Limit starts per Per.
type RateSpec struct {
	Limit int    `json:"limit" minimum:"1" maximum:"100000" doc:"tokens (starts) per window"`
	Per   string `json:"per" maxLength:"32" doc:"the window, a Go duration from 1ms to 24h (\"1s\", \"1m\")"`
}

// RateKey is the token bucket of one key of a rate limit.
type RateKey struct {
	Name   string  `json:"name" doc:"the rate limit's name (rate_limit.name; default the workflow's name)"`
	Key    string  `json:"key" doc:"the key, the value of rate_limit.key for the step's run (empty: one bucket for the whole limit)"`
	Tokens float64 `json:"tokens" doc:"tokens left now: starts allowed at once"`
	Limit  int     `json:"limit" doc:"tokens per window in force: the one set by PUT /v1/limits/{name} if any, else the steps' own"`
	Per    string  `json:"per" doc:"the window in force (Go duration)"`
	Ready  int     `json:"ready" doc:"steps of the key ready to start"`
}

// Limits is the body of GET /v1/limits.
type Limits struct {
	Keys      []LimitKey      `json:"keys" doc:"every concurrency key with a step running or ready, by name and key (at most 1000)"`
	Overrides []LimitOverride `json:"overrides" doc:"the concurrency and rate limits set at run time"`
	Rates     []RateKey       `json:"rates" doc:"every rate limit bucket, by name and key (at most 1000): one per key a step has started under"`
}

// PutLimitBody is the body of PUT /v1/limits/{name}: one field or both; a field
// left out keeps the limit it names as it is.
type PutLimitBody struct {
	Concurrency *int      `json:"concurrency,omitempty" minimum:"1" maximum:"100000" doc:"slots per key of the concurrency limit"`
	RateLimit   *RateSpec `json:"rate_limit,omitempty" doc:"the rate limit's tokens per window"`
}

// LimitNameParam is the {name} path parameter of a limit.
type LimitNameParam struct {
	Name string `path:"name" pattern:"^[a-z0-9][a-z0-9_.-]*$" maxLength:"63" doc:"the limit's name"`
}

// Resolve qualifies Name in the request's namespace (api/namespace.go).
func (p *LimitNameParam) Resolve(ctx huma.Context) []error {
	p.Name = qualify(ctx.Context(), p.Name)
	return nil
}

func overrideOf(o *catalog.LimitOverride) LimitOverride {
	out := LimitOverride{Name: namespace.Strip(o.Name), Concurrency: o.Concurrency, UpdatedAt: o.UpdatedAt.UTC(), UpdatedBy: o.UpdatedBy}
	if o.RateLimit != nil && o.RatePerS != nil {
		out.RateLimit = &RateSpec{Limit: *o.RateLimit, Per: secondsString(*o.RatePerS)}
	}
	return out
}

// secondsString is a window in seconds as a Go duration.
func secondsString(s float64) string {
	return time.Duration(math.Round(s * float64(time.Second))).String()
}

// limitSetParams checks the body of PUT /v1/limits/{name}: a 422 naming the field at
// fault.
func limitSetParams(b *PutLimitBody) (catalog.LimitSetParams, error) {
	var p catalog.LimitSetParams
	if b.Concurrency == nil && b.RateLimit == nil {
		return p, classValidationFailed.problem("nothing to change",
			&huma.ErrorDetail{Location: "body", Message: "give concurrency, rate_limit, or both"})
	}
	if b.Concurrency != nil {
		p.Concurrency = *b.Concurrency
	}
	if r := b.RateLimit; r != nil {
		per, err := time.ParseDuration(r.Per)
		if err != nil || per < catalog.MinRatePer || per > catalog.MaxRatePer {
			return p, classValidationFailed.problem("invalid window",
				&huma.ErrorDetail{Location: "body.rate_limit.per", Value: r.Per,
					Message: fmt.Sprintf("a Go duration from %s to %s", catalog.MinRatePer, catalog.MaxRatePer)})
		}
		p.RateLimit, p.RatePer = r.Limit, per
	}
	return p, nil
}

func (s *Server) registerLimits() {
	register(s, huma.Operation{
		OperationID: "listLimits",
		Method:      http.MethodGet,
		Path:        "/v1/limits",
		Summary:     "Show concurrency limits in use",
		Description: "The slots in use and the steps waiting, per key of each concurrency limit, the limits set at run time, and the token buckets of the rate limits. A slot is a running step: it is free again when the step's lease ends (finish, suspend, cancel, or the sweep of a dead dispatcher's lease).",
		Tags:        []string{"limits"},
	}, RoleViewer, nil, func(ctx context.Context, in *struct {
		Name string `query:"name" pattern:"^[a-z0-9][a-z0-9_.-]*$" maxLength:"63" doc:"only this limit"`
	}) (*struct{ Body Limits }, error) {
		// The limits of the request's namespace only (api/namespace.go).
		ns, name := requestNamespace(ctx), qualify(ctx, in.Name)
		use, ovr, err := s.store.LimitList(ctx, name)
		if err != nil {
			return nil, err
		}
		rates, err := s.store.RateList(ctx, name)
		if err != nil {
			return nil, err
		}
		mine := func(key string) bool { return namespace.Of(key) == ns }
		use = slices.DeleteFunc(use, func(u catalog.LimitUsage) bool { return !mine(u.Name) })
		ovr = slices.DeleteFunc(ovr, func(o catalog.LimitOverride) bool { return !mine(o.Name) })
		rates = slices.DeleteFunc(rates, func(r catalog.RateUsage) bool { return !mine(r.Name) })
		out := &struct{ Body Limits }{Body: Limits{Keys: make([]LimitKey, len(use)), Overrides: make([]LimitOverride, len(ovr)),
			Rates: make([]RateKey, len(rates))}}
		for i, r := range rates {
			out.Body.Rates[i] = RateKey{Name: namespace.Strip(r.Name), Key: r.Key, Tokens: math.Floor(r.Tokens*1000) / 1000, Limit: r.Limit,
				Per: secondsString(r.PerS), Ready: r.Ready}
		}
		for i, u := range use {
			out.Body.Keys[i] = LimitKey{Name: namespace.Strip(u.Name), Key: u.Key, Running: u.Running, Ready: u.Ready, Limit: u.Limit}
		}
		for i := range ovr {
			out.Body.Overrides[i] = overrideOf(&ovr[i])
		}
		return out, nil
	})

	register(s, huma.Operation{
		OperationID: "putLimit",
		Method:      http.MethodPut,
		Path:        "/v1/limits/{name}",
		Summary:     "Change a concurrency or rate limit",
		Description: "Sets the slots per key (`concurrency`) and/or the tokens per window (`rate_limit`) of the limit, for every step whose concurrency or rate_limit names it, replacing the steps' own from the next claim on; a field left out keeps its value. The override is kept in the catalog: it survives restarts and deploys and wins over the manifest until `DELETE /v1/limits/{name}` clears it. Running steps keep running: a lower limit only holds back the next starts.",
		Tags:        []string{"limits"},
	}, RoleAdmin, []problemClass{classValidationFailed}, func(ctx context.Context, in *struct {
		LimitNameParam
		Body PutLimitBody
	}) (*struct{ Body LimitOverride }, error) {
		p, err := limitSetParams(&in.Body)
		if err != nil {
			return nil, err
		}
		o, err := s.store.LimitSet(ctx, in.Name, p, actor(ctx))
		if err != nil {
			return nil, err
		}
		return &struct{ Body LimitOverride }{Body: overrideOf(o)}, nil
	})

	register(s, huma.Operation{
		OperationID:   "clearLimit",
		Method:        http.MethodDelete,
		Path:          "/v1/limits/{name}",
		Summary:       "Clear the limits set at run time",
		Description:   "Removes the concurrency and rate limits set by PUT /v1/limits/{name}: the steps' own limits (their manifests') apply again from the next claim. Clearing a name without an override does nothing.",
		Tags:          []string{"limits"},
		DefaultStatus: http.StatusNoContent,
	}, RoleAdmin, nil, func(ctx context.Context, in *LimitNameParam) (*struct{}, error) {
		return &struct{}{}, s.store.LimitClear(ctx, in.Name)
	})
}
