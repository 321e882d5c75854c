package catalog_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
)

// oneStepVersion registers workflow with one step "s" defined by step (the fields
// of its definition beside key, needs and with, as JSON without braces).
func oneStepVersion(t *testing.T, ctx context.Context, s *catalog.Store, workflow, step string) {
	t.Helper()
	var sum [32]byte
	_, _ = rand.Read(sum[:])
	digest := "sha256:" + hex.EncodeToString(sum[:])
	def := `{"steps":[{"key":"s","needs":[],"with":{}` + step + `}]}`
	_, _, err := s.VersionRegister(ctx, &catalog.VersionRegisterParams{
		Workflow: workflow, Digest: digest, Size: 1, BlobKey: "bundles/sha256/" + digest[7:],
		Definition: json.RawMessage(def), Fingerprint: digest, Steps: []catalog.NewStep{{Key: "s", MaxAttempts: 1}},
	})
	require.NoError(t, err)
}

// demandOf reads a pool's demand: claimable and running.
func demandOf(t *testing.T, ctx context.Context, s *catalog.Store, tags ...string) [2]int64 {
	t.Helper()
	d, err := s.PoolDemandGet(ctx, tags, 0)
	require.NoError(t, err)
	return [2]int64{d.Claimable, d.Running}
}

// TestPoolDemand: a pool's demand rises with the steps it could claim, holds while
// its dispatchers run them, and falls to 0 as they finish; other pools' steps are
// not its demand.
func TestPoolDemand(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	oneStepVersion(t, ctx, s, "train", `,"runs_on":["gpu"]`)
	oneStepVersion(t, ctx, s, "plain", ``)
	require.Equal(t, [2]int64{0, 0}, demandOf(t, ctx, s, "gpu"))

	for range 3 {
		flowRun(t, ctx, s, "train", `{}`)
	}
	flowRun(t, ctx, s, "plain", `{}`)
	require.Equal(t, [2]int64{4, 0}, demandOf(t, ctx, s, "gpu"), "its own steps and the untagged one")
	require.Equal(t, [2]int64{1, 0}, demandOf(t, ctx, s), "the untagged pool cannot claim gpu steps")
	require.Equal(t, [2]int64{4, 0}, demandOf(t, ctx, s, "gpu", "gpu", ""), "tags are a set")
	capped, err := s.PoolDemandGet(ctx, []string{"gpu"}, 2)
	require.NoError(t, err)
	require.EqualValues(t, 2, capped.Claimable, "counted up to the cap")

	// A gpu dispatcher takes two: they are its running attempts.
	require.NoError(t, s.DispatcherBeat(ctx, "gpu-1", []string{"gpu"}))
	claimed, _, err := s.StepClaimNext(ctx, "gpu-1", []string{"gpu"}, 2, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	require.Equal(t, [2]int64{2, 2}, demandOf(t, ctx, s, "gpu"))
	require.Equal(t, [2]int64{2, 0}, demandOf(t, ctx, s, "gpu", "big"), "a pool with more tags could claim the rest too, but holds no lease")

	for _, c := range claimed {
		require.NoError(t, finish(t, ctx, s, c, catalog.OutcomeSucceeded, false, `{}`))
	}
	require.Equal(t, [2]int64{2, 0}, demandOf(t, ctx, s, "gpu"))
	claimed, _, err = s.StepClaimNext(ctx, "gpu-1", []string{"gpu"}, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	require.Equal(t, [2]int64{0, 2}, demandOf(t, ctx, s, "gpu"), "no step left to claim, but leases held: not idle")
	for _, c := range claimed {
		require.NoError(t, finish(t, ctx, s, c, catalog.OutcomeSucceeded, false, `{}`))
	}
	require.Equal(t, [2]int64{0, 0}, demandOf(t, ctx, s, "gpu"))
}

// TestPoolDemandBlocked: ready steps that a pool cannot claim now are not its
// demand: those of a paused run, of a full concurrency key (held by another pool),
// of an empty rate bucket; the backlog gauge (cairn_steps_ready) still counts them.
func TestPoolDemandBlocked(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	oneStepVersion(t, ctx, s, "conc", `,"runs_on":["b"],"concurrency":{"name":"one","limit":1}`)
	oneStepVersion(t, ctx, s, "rated", `,"runs_on":["b"],"rate_limit":{"name":"hourly","limit":1,"per":"1h0m0s","per_ms":3600000}`)
	oneStepVersion(t, ctx, s, "paused", `,"runs_on":["b"]`)

	// A dispatcher of another pool (tags b and x) runs the key's one slot.
	require.NoError(t, s.DispatcherBeat(ctx, "bx-1", []string{"b", "x"}))
	flowRun(t, ctx, s, "conc", `{}`)
	held, _, err := s.StepClaimNext(ctx, "bx-1", []string{"b", "x"}, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, held, 1)
	for range 3 {
		flowRun(t, ctx, s, "conc", `{}`)
	}
	require.Equal(t, [2]int64{0, 0}, demandOf(t, ctx, s, "b"), "the key is full")
	require.Equal(t, [2]int64{0, 1}, demandOf(t, ctx, s, "b", "x"), "the other pool runs the slot")

	// The rate bucket holds one token: one step of three is claimable, then none.
	for range 3 {
		flowRun(t, ctx, s, "rated", `{}`)
	}
	require.Equal(t, [2]int64{1, 0}, demandOf(t, ctx, s, "b"), "one token")
	require.NoError(t, s.DispatcherBeat(ctx, "b-1", []string{"b"}))
	rated, _, err := s.StepClaimNext(ctx, "b-1", []string{"b"}, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, rated, 1)
	require.NoError(t, finish(t, ctx, s, rated[0], catalog.OutcomeSucceeded, false, `{}`))
	require.NoError(t, s.DispatcherGone(ctx, "b-1"))

	// A paused run's ready step is held.
	p := flowRun(t, ctx, s, "paused", `{}`)
	require.Equal(t, [2]int64{1, 0}, demandOf(t, ctx, s, "b"))
	_, err = s.RunPause(ctx, p, "alice", "")
	require.NoError(t, err)

	require.Equal(t, [2]int64{0, 0}, demandOf(t, ctx, s, "b"), "every step of the pool is blocked")
	g, err := s.StepGaugesGet(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 5, g.Ready, "the backlog: 3 of the full key, 2 of the empty bucket")
}
