package api

import (
	"context"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
)

// Capacity is the body of GET /v1/capacity: a pool's demand, the signal its
// autoscaler scales on (docs/scaling.md).
type Capacity struct {
	Tags      []string `json:"tags" doc:"the pool's tags, sorted (empty: the untagged pool)"`
	Claimable int64    `json:"claimable" doc:"ready steps the pool could claim now: runs_on within its tags, not held by a paused run, their concurrency key not full, their rate bucket not empty (as many as the key's free slots and the bucket's whole tokens); at most 100000"`
	Running   int64    `json:"running" doc:"attempts leased to the pool's dispatchers (those that run with exactly these tags), including those of a dispatcher that died, until the sweep makes their steps ready again"`
	Demand    int64    `json:"demand" doc:"claimable + running, as the gauge cairn_pool_demand reports it: 0 only when the pool has nothing to start and no lease to lose, when scaling it to zero is safe"`
}

// capacityTags splits the tags query parameter ("gpu,cuda"): a 422 naming the
// first tag that is not one.
func capacityTags(q string) ([]string, error) {
	tags, bad := bundle.ParseTags(q)
	if bad != "" {
		return nil, classValidationFailed.problem("invalid tag", &huma.ErrorDetail{Location: "query.tags", Value: bad,
			Message: "a tag is " + bundle.TagRule})
	}
	return tags, nil
}

func (s *Server) registerCapacity() {
	register(s, everyNamespace(huma.Operation{
		OperationID: "getCapacity",
		Method:      http.MethodGet,
		Path:        "/v1/capacity",
		Summary:     "Show the demand of a pool of dispatchers",
		Description: "What a pool of dispatchers that run with these tags (`cairn serve --tags`) has to do now: the steps it could claim, the attempts it holds, and their sum, the demand an autoscaler scales the pool on (KEDA's metrics-api scaler reads `demand`; the gauge cairn_pool_demand is the same number). A pool may scale to zero only when its demand is 0: nothing to claim and no lease held.",
		Tags:        []string{"limits"},
	}), RoleViewer, []problemClass{classValidationFailed}, func(ctx context.Context, in *struct {
		Tags string `query:"tags" maxLength:"4096" doc:"the pool's tags, comma-separated (gpu,cuda); empty or absent: the untagged pool"`
	}) (*struct{ Body Capacity }, error) {
		tags, err := capacityTags(in.Tags)
		if err != nil {
			return nil, err
		}
		d, err := s.store.PoolDemandGet(ctx, tags, catalog.DefaultDemandCap)
		if err != nil {
			return nil, err
		}
		return &struct{ Body Capacity }{Body: Capacity{Tags: d.Tags, Claimable: d.Claimable, Running: d.Running, Demand: d.Demand()}}, nil
	})
}
