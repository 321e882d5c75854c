package catalog_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/cairnrun/cairn/catalog"
)

// flowVersion registers a version of workflow with one step, "s", whose definition
// has the concurrency limit conc (JSON), and returns its number.
func flowVersion(t *testing.T, s *catalog.Store, workflow, conc string) int {
	t.Helper()
	return definitionVersion(t, s, workflow,
		fmt.Sprintf(`{"steps":[{"key":"s","needs":[],"with":{"w":"x"},"concurrency":%s}]}`, conc))
}

func flowRun(t *testing.T, ctx context.Context, s *catalog.Store, workflow, input string) uuid.UUID {
	t.Helper()
	r, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: workflow, Input: json.RawMessage(input)})
	require.NoError(t, err)
	return r.ID
}

// runningPerKey counts the running steps of each concurrency key, from the catalog.
func runningPerKey(t *testing.T, ctx context.Context, s *catalog.Store) map[string]int {
	t.Helper()
	use, _, err := s.LimitList(ctx, "")
	require.NoError(t, err)
	out := map[string]int{}
	for _, u := range use {
		out[u.Name+"/"+u.Key] = u.Running
	}
	return out
}

// TestConcurrencyLimit: at most limit steps of one key run at once; the others stay
// ready, blocked; a slot is free again in the transaction that ends the holder's
// lease (a finish, a sweep); a limit changed at run time applies to the next claim.
func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	flowVersion(t, s, "wf", `{"name":"tenant","key":"input.tenant","limit":2}`)
	runs := map[string][]uuid.UUID{}
	for i := range 10 {
		tenant := []string{"a", "b"}[i%2]
		runs[tenant] = append(runs[tenant], flowRun(t, ctx, s, "wf", fmt.Sprintf(`{"tenant":%q}`, tenant)))
	}
	got := claimKeys(t, ctx, s, "d1", 4)
	_ = got
	require.Equal(t, map[string]int{"tenant/a": 2, "tenant/b": 2}, runningPerKey(t, ctx, s))
	// The usage of each key counts its running steps and the ready ones it holds back.
	use, _, err := s.LimitList(ctx, "")
	require.NoError(t, err)
	require.Len(t, use, 2)
	for _, u := range use {
		require.Equal(t, []int{2, 3, 2}, []int{u.Running, u.Ready, u.Limit}, "key %s", u.Key)
	}
	claimKeys(t, ctx, s, "d2", 0)

	// A waiting step says what holds it.
	var waiting uuid.UUID
	for _, id := range runs["a"] {
		if stepStatus(t, ctx, s, id, "s") == catalog.StepReady {
			waiting = id
			break
		}
	}
	blocked, err := s.StepsBlocked(ctx, waiting)
	require.NoError(t, err)
	require.Equal(t, catalog.BlockedBy{Kind: "concurrency", Name: "tenant", Key: "a", InUse: 2, Limit: 2}, blocked["s"])

	// A finish frees its slot.
	claimed, err := s.StepClaim(ctx, "d3", 100, time.Minute)
	require.NoError(t, err)
	require.Empty(t, claimed)
	var holder catalog.Claimed
	for _, id := range runs["a"] {
		st, err := s.StepGet(ctx, id, "s")
		require.NoError(t, err)
		if st.Status == catalog.StepRunning {
			holder = catalog.Claimed{RunID: id, Key: "s", LeaseToken: *st.LeaseToken}
			break
		}
	}
	require.NoError(t, finish(t, ctx, s, holder, catalog.OutcomeSucceeded, false, `{}`))
	one := claimKeys(t, ctx, s, "d1", 1)
	require.Contains(t, runs["a"], one["s"].RunID)

	// A lease that expires (its dispatcher died) is swept, and its slot is free.
	_, err = s.DB().ExecContext(ctx, `UPDATE steps SET lease_expires_at = now() - interval '1 hour'
WHERE run_id = $1 AND key = 's'`, one["s"].RunID)
	require.NoError(t, err)
	n, err := s.StepSweep(ctx, 100, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, map[string]int{"tenant/a": 1, "tenant/b": 2}, runningPerKey(t, ctx, s))
	claimKeys(t, ctx, s, "d1", 1)

	// A limit raised at run time.
	o, err := s.LimitSet(ctx, "tenant", catalog.LimitSetParams{Concurrency: 3}, "alice")
	require.NoError(t, err)
	require.Equal(t, 3, *o.Concurrency)
	claimKeys(t, ctx, s, "d1", 2)
	use, ovr, err := s.LimitList(ctx, "tenant")
	require.NoError(t, err)
	require.Len(t, ovr, 1)
	require.Equal(t, "alice", ovr[0].UpdatedBy)
	require.Len(t, use, 2)
	for _, u := range use {
		require.Equal(t, 3, u.Running)
		require.Equal(t, 3, u.Limit)
		require.Equal(t, 2, u.StepLimit)
	}
	_, err = s.LimitSet(ctx, "tenant", catalog.LimitSetParams{}, "alice")
	require.ErrorIs(t, err, catalog.ErrInvalidInput)
}

// raceClaims runs 8 claimers at once (owners d0 to d7), each calling claim
// rounds times, and returns how many steps they claimed in all.
func raceClaims(t *testing.T, rounds int, claim func(owner string) ([]catalog.Claimed, error)) int {
	t.Helper()
	var g errgroup.Group
	counts := make([]int, 8)
	for i := range counts {
		g.Go(func() error {
			for range rounds {
				c, err := claim(fmt.Sprintf("d%d", i))
				if err != nil {
					return err
				}
				counts[i] += len(c)
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	total := 0
	for _, n := range counts {
		total += n
	}
	return total
}

// TestConcurrencyClaimRace: claimers racing for the steps of one key never start
// more than the limit between them, whether they claim in a transaction that
// takes the keys' turns (StepClaim, the keys having rows) or in one statement
// (the claim by age, when no key takes turns).
func TestConcurrencyClaimRace(t *testing.T) {
	t.Parallel()
	for name, claim := range map[string]func(*catalog.Store, context.Context, string, int, time.Duration) ([]catalog.Claimed, error){
		"turns":         (*catalog.Store).StepClaim,
		"one statement": catalog.ClaimAlone,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, tb := setup(t)
			s := tb.store
			flowVersion(t, s, "race", `{"name":"race","key":"string(input.n % 3)","limit":2}`)
			for i := range 60 {
				flowRun(t, ctx, s, "race", fmt.Sprintf(`{"n":%d}`, i))
			}
			total := raceClaims(t, 5, func(owner string) ([]catalog.Claimed, error) {
				return claim(s, ctx, owner, 3, time.Minute)
			})
			require.Equal(t, 6, total)
			require.Equal(t, map[string]int{"race/0": 2, "race/1": 2, "race/2": 2}, runningPerKey(t, ctx, s))
		})
	}
}

// TestConcurrencyKey: the key is evaluated once, when the run's steps are created; a
// key that cannot be evaluated refuses the run; the name defaults to none here (the
// definition always has one, bundle fills in the workflow's).
func TestConcurrencyKey(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	flowVersion(t, s, "keys", `{"name":"k","key":"run.workflow + '-' + params.w + '-' + string(input.n)","limit":1}`)
	id := flowRun(t, ctx, s, "keys", `{"n":7}`)
	claimKeys(t, ctx, s, "d1", 1)
	require.Equal(t, map[string]int{"k/keys-x-7": 1}, runningPerKey(t, ctx, s))
	_, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "keys", Input: json.RawMessage(`{}`)})
	require.ErrorIs(t, err, catalog.ErrFlowKey)
	require.ErrorIs(t, err, catalog.ErrInvalidInput)

	// A rerun's steps get their keys too.
	flowVersion(t, s, "plain", `{"name":"p","limit":1}`)
	flowRun(t, ctx, s, "plain", `{}`)
	claimKeys(t, ctx, s, "d1", 1)
	flowRun(t, ctx, s, "plain", `{}`)
	claimKeys(t, ctx, s, "d1", 0)
	_ = id
}

// TestRateLimit: a claim takes one token per step it starts from the key's bucket
// (limit tokens, refilled evenly over per); the others stay ready, blocked, and the
// claim says when the next token is in. A step with both limits starts only when
// both let it.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	rateLimitedVersion(t, ctx, s, 5)
	var waiting []uuid.UUID
	for range 8 {
		waiting = append(waiting, flowRun(t, ctx, s, "rl", `{"acct":"a"}`))
	}
	other := flowRun(t, ctx, s, "rl", `{"acct":"b"}`)

	claimed, next, err := s.StepClaimNext(ctx, "d1", nil, 100, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 6, "5 tokens of a, 1 of b")
	require.InDelta(t, (12 * time.Minute).Seconds(), next.Seconds(), 5, "a's next token: per / limit")
	for _, c := range claimed {
		if c.RunID == other {
			other = uuid.Nil
		}
	}
	require.Equal(t, uuid.Nil, other, "b has a bucket of its own")

	var blockedRun uuid.UUID
	for _, id := range waiting {
		if stepStatus(t, ctx, s, id, "s") == catalog.StepReady {
			blockedRun = id
		}
	}
	blocked, err := s.StepsBlocked(ctx, blockedRun)
	require.NoError(t, err)
	require.Equal(t, catalog.BlockedBy{Kind: "rate_limit", Name: "api", Key: "a", InUse: 5, Limit: 5}, blocked["s"])
	claimKeys(t, ctx, s, "d2", 0)
	rates, err := s.RateList(ctx, "api")
	require.NoError(t, err)
	require.Len(t, rates, 2)
	require.Equal(t, "a", rates[0].Key)
	require.Less(t, rates[0].Tokens, 0.01)
	require.Equal(t, 3, rates[0].Ready)
	require.Equal(t, 5, rates[0].Limit)
	require.InDelta(t, 4, rates[1].Tokens, 0.01)

	// One token's time later (the bucket's clock moved back), one more starts.
	_, err = s.DB().ExecContext(ctx, `UPDATE rate_buckets SET at = at - interval '12 minutes' WHERE name = 'api' AND key = 'a'`)
	require.NoError(t, err)
	claimKeys(t, ctx, s, "d2", 1)
	claimKeys(t, ctx, s, "d2", 0)

	// A key that cannot be evaluated refuses the run.
	_, _, err = s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "rl", Input: json.RawMessage(`{}`)})
	require.ErrorIs(t, err, catalog.ErrFlowKey)
}

// TestRateLimitRace: claimers racing for one bucket never take more tokens than it
// holds between them.
func TestRateLimitRace(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	var sum [32]byte
	_, _ = rand.Read(sum[:])
	digest := "sha256:" + hex.EncodeToString(sum[:])
	def := `{"steps":[{"key":"s","needs":[],"with":{},"concurrency":{"name":"both","limit":50},"rate_limit":{"name":"race","limit":7,"per":"1h0m0s","per_ms":3600000}}]}`
	_, _, err := s.VersionRegister(ctx, &catalog.VersionRegisterParams{
		Workflow: "rr", Digest: digest, Size: 1, BlobKey: "bundles/sha256/" + digest[7:],
		Definition: json.RawMessage(def), Fingerprint: digest, Steps: []catalog.NewStep{{Key: "s", MaxAttempts: 1}},
	})
	require.NoError(t, err)
	for range 40 {
		flowRun(t, ctx, s, "rr", `{}`)
	}
	total := raceClaims(t, 4, func(owner string) ([]catalog.Claimed, error) {
		return s.StepClaim(ctx, owner, 2, time.Minute)
	})
	require.Equal(t, 7, total)
}

// TestPriority: ready steps are claimed by priority (the step's, or the run's at
// start), then age.
func TestPriority(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	var sum [32]byte
	_, _ = rand.Read(sum[:])
	digest := "sha256:" + hex.EncodeToString(sum[:])
	def := `{"steps":[{"key":"hi","needs":[],"with":{},"priority":8},{"key":"lo","needs":[],"with":{},"priority":1},{"key":"mid","needs":[],"with":{}}]}`
	_, _, err := s.VersionRegister(ctx, &catalog.VersionRegisterParams{
		Workflow: "prio", Digest: digest, Size: 1, BlobKey: "bundles/sha256/" + digest[7:],
		Definition: json.RawMessage(def), Fingerprint: digest,
		Steps: []catalog.NewStep{{Key: "hi", MaxAttempts: 1}, {Key: "lo", MaxAttempts: 1}, {Key: "mid", MaxAttempts: 1}},
	})
	require.NoError(t, err)
	first := flowRun(t, ctx, s, "prio", `{}`)
	nine := 9
	urgent, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "prio", Priority: &nine})
	require.NoError(t, err)
	bad := 10
	_, _, err = s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "prio", Priority: &bad})
	require.ErrorIs(t, err, catalog.ErrInvalidInput)

	var order []string
	for range 6 {
		c, err := s.StepClaim(ctx, "d1", 1, time.Minute)
		require.NoError(t, err)
		require.Len(t, c, 1)
		run := "first"
		if c[0].RunID == urgent.ID {
			run = "urgent"
		}
		order = append(order, run+"/"+c[0].Key)
	}
	require.Equal(t, "urgent", order[0][:6])
	require.Equal(t, "urgent", order[1][:6])
	require.Equal(t, "urgent", order[2][:6])
	require.Equal(t, []string{"first/hi", "first/mid", "first/lo"}, order[3:])
	st, err := s.StepGet(ctx, first, "lo")
	require.NoError(t, err)
	require.Equal(t, 1, st.Priority)
}

// TestRunsOn: a step with runs_on is claimed only by a dispatcher with all its tags;
// until a live one is registered it is blocked_by no_dispatcher.
func TestRunsOn(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	var sum [32]byte
	_, _ = rand.Read(sum[:])
	digest := "sha256:" + hex.EncodeToString(sum[:])
	def := `{"steps":[{"key":"g","needs":[],"with":{},"runs_on":["billing","gpu"]},{"key":"any","needs":[],"with":{}}]}`
	_, _, err := s.VersionRegister(ctx, &catalog.VersionRegisterParams{
		Workflow: "place", Digest: digest, Size: 1, BlobKey: "bundles/sha256/" + digest[7:],
		Definition: json.RawMessage(def), Fingerprint: digest,
		Steps: []catalog.NewStep{{Key: "g", MaxAttempts: 1}, {Key: "any", MaxAttempts: 1}},
	})
	require.NoError(t, err)
	id := flowRun(t, ctx, s, "place", `{}`)

	require.NoError(t, s.DispatcherBeat(ctx, "plain", nil))
	require.NoError(t, s.DispatcherBeat(ctx, "half", []string{"gpu"}))
	c, _, err := s.StepClaimNext(ctx, "plain", nil, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, c, 1)
	require.Equal(t, "any", c[0].Key)
	c, _, err = s.StepClaimNext(ctx, "half", []string{"gpu"}, 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, c, "a dispatcher needs every tag")
	blocked, err := s.StepsBlocked(ctx, id)
	require.NoError(t, err)
	require.Equal(t, catalog.BlockedBy{Kind: "no_dispatcher", RunsOn: []string{"billing", "gpu"}}, blocked["g"])

	require.NoError(t, s.DispatcherBeat(ctx, "full", []string{"billing", "gpu", "x"}))
	blocked, err = s.StepsBlocked(ctx, id)
	require.NoError(t, err)
	require.Empty(t, blocked)
	live, err := s.DispatcherList(ctx)
	require.NoError(t, err)
	require.Len(t, live, 3)
	c, _, err = s.StepClaimNext(ctx, "full", []string{"billing", "gpu", "x"}, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, c, 1)
	require.Equal(t, "g", c[0].Key)
	require.NoError(t, s.DispatcherGone(ctx, "full"))
	live, err = s.DispatcherList(ctx)
	require.NoError(t, err)
	require.Len(t, live, 2)
}

// TestQueueTimeout: a ready step blocked past its queue_timeout fails, code
// queue_timeout (its dependents skipped, the run failed); one that started in time
// does not.
func TestQueueTimeout(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	var sum [32]byte
	_, _ = rand.Read(sum[:])
	digest := "sha256:" + hex.EncodeToString(sum[:])
	def := `{"steps":[{"key":"a","needs":[],"with":{},"concurrency":{"name":"q","limit":1},"queue_timeout":"1h0m0s","queue_timeout_ms":3600000},{"key":"b","needs":["a"],"with":{}}]}`
	_, _, err := s.VersionRegister(ctx, &catalog.VersionRegisterParams{
		Workflow: "qt", Digest: digest, Size: 1, BlobKey: "bundles/sha256/" + digest[7:],
		Definition: json.RawMessage(def), Fingerprint: digest,
		Steps: []catalog.NewStep{{Key: "a", MaxAttempts: 1}, {Key: "b", Needs: []string{"a"}, MaxAttempts: 1}},
	})
	require.NoError(t, err)
	first := flowRun(t, ctx, s, "qt", `{}`)
	claimKeys(t, ctx, s, "d1", 1)
	second := flowRun(t, ctx, s, "qt", `{}`)
	claimKeys(t, ctx, s, "d1", 0)
	n, err := s.QueueTimeouts(ctx, 10)
	require.NoError(t, err)
	require.Zero(t, n, "not yet")

	// An hour and more later (the step's ready_at moved back).
	_, err = s.DB().ExecContext(ctx, `UPDATE steps SET ready_at = ready_at - interval '2 hours' WHERE run_id = ANY($1)`,
		pq.Array([]uuid.UUID{first, second}))
	require.NoError(t, err)
	n, err = s.QueueTimeouts(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the step still waiting")
	st, err := s.StepGet(ctx, second, "a")
	require.NoError(t, err)
	require.Equal(t, catalog.StepFailed, st.Status)
	require.JSONEq(t, `"queue_timeout"`, string(jsonField(t, st.LastError, "code")))
	require.Equal(t, map[string]string{"a": "failed", "b": "skipped"}, statuses(t, ctx, s, second))
	require.Equal(t, catalog.RunFailed, runOf(t, ctx, s, second).Status)
	require.Equal(t, catalog.StepRunning, stepStatus(t, ctx, s, first, "a"))
}

func jsonField(t *testing.T, raw []byte, field string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &m))
	return m[field]
}

// TestRunDeadline: a run past its deadline (given at start, or the manifest's
// timeout) fails, code deadline_exceeded: its running attempt and unfinished steps
// are canceled; a run without one, or ended, is left alone.
func TestRunDeadline(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	var sum [32]byte
	_, _ = rand.Read(sum[:])
	digest := "sha256:" + hex.EncodeToString(sum[:])
	def := `{"timeout":"1h0m0s","timeout_ms":3600000,"steps":[{"key":"a","needs":[],"with":{}},{"key":"b","needs":["a"],"with":{}}]}`
	_, _, err := s.VersionRegister(ctx, &catalog.VersionRegisterParams{
		Workflow: "dl", Digest: digest, Size: 1, BlobKey: "bundles/sha256/" + digest[7:],
		Definition: json.RawMessage(def), Fingerprint: digest,
		Steps: []catalog.NewStep{{Key: "a", MaxAttempts: 1}, {Key: "b", Needs: []string{"a"}, MaxAttempts: 1}},
	})
	require.NoError(t, err)
	past := time.Now().Add(-time.Minute)
	late, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "dl", Deadline: &past})
	require.NoError(t, err)
	timed := flowRun(t, ctx, s, "dl", `{}`)
	claimKeys(t, ctx, s, "d1", 2)

	n, err := s.RunDeadlines(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	r := runOf(t, ctx, s, late.ID)
	require.Equal(t, catalog.RunFailed, r.Status)
	require.JSONEq(t, `"deadline_exceeded"`, string(jsonField(t, jsonField(t, r.Error, "cause"), "code")))
	require.Equal(t, map[string]string{"a": "canceled", "b": "canceled"}, statuses(t, ctx, s, late.ID))
	atts, err := s.AttemptList(ctx, late.ID, "a")
	require.NoError(t, err)
	require.Equal(t, catalog.AttemptStatus("canceled"), atts[0].Status)

	// The manifest's timeout: an hour after creation (the clock moved on).
	require.Equal(t, catalog.StepRunning, stepStatus(t, ctx, s, timed, "a"))
	_, err = s.DB().ExecContext(ctx, `UPDATE runs SET deadline_at = deadline_at - interval '61 minutes' WHERE id = $1`, timed)
	require.NoError(t, err)
	n, err = s.RunDeadlines(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, catalog.RunFailed, runOf(t, ctx, s, timed).Status)
	n, err = s.RunDeadlines(ctx, 10)
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestFairOrderBetweenKeys: the keys of one limit take turns. Tenant a's 500 ready
// steps are older than tenant b's 5, and the claimer (a dispatcher with room for 2)
// rather than the limit (2 per key) is the bottleneck: taken oldest first, b's
// steps would wait for a's whole backlog; in turns, they all start before a's 50th.
// Priority still comes first: a's urgent step, created last, starts first.
func TestFairOrderBetweenKeys(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	flowVersion(t, s, "wf", `{"name":"tenant","key":"input.tenant","limit":2}`)
	tenant := map[uuid.UUID]string{}
	for range 500 {
		tenant[flowRun(t, ctx, s, "wf", `{"tenant":"a"}`)] = "a"
	}
	for range 5 {
		tenant[flowRun(t, ctx, s, "wf", `{"tenant":"b"}`)] = "b"
	}
	nine := 9
	urgent, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", Input: json.RawMessage(`{"tenant":"a"}`), Priority: &nine})
	require.NoError(t, err)
	tenant[urgent.ID] = "urgent"

	var (
		running []catalog.Claimed
		started []string // the tenant of each start, in order
		aStarts int
		bStarts int
	)
	for bStarts < 5 && aStarts < 50 {
		claimed, err := s.StepClaim(ctx, "d1", 2-len(running), time.Minute)
		require.NoError(t, err)
		require.NotEmpty(t, claimed, "a step of each tenant is ready and a slot is free")
		for _, c := range claimed {
			started = append(started, tenant[c.RunID])
			switch tenant[c.RunID] {
			case "a":
				aStarts++
			case "b":
				bStarts++
			}
		}
		running = append(running, claimed...)
		// The oldest running step ends; its slot is free for the next claim.
		require.NoError(t, finish(t, ctx, s, running[0], catalog.OutcomeSucceeded, false, `{}`))
		running = running[1:]
	}
	require.Equal(t, "urgent", started[0], "priority before turns: %v", started)
	require.Equal(t, 5, bStarts, "every step of b starts before a's 50th: %v", started)
	require.Less(t, aStarts, 10, "a and b take turns: %v", started)
}

// flowOf reads the flow settings of a step from the catalog: "name/key/limit
// rate:name/key/limit/per p<priority> on<runs_on> q<queue_timeout>".
func flowOf(t *testing.T, ctx context.Context, s *catalog.Store, run uuid.UUID, key string) string {
	t.Helper()
	var out string
	require.NoError(t, s.DB().GetContext(ctx, &out, `
SELECT concat_ws(' ', coalesce(conc_name || '/' || conc_key || '/' || conc_limit, '-'),
                 coalesce('rate:' || rate_name || '/' || rate_key || '/' || rate_limit || '/' || rate_per_s, '-'),
                 'p' || priority, 'on' || coalesce(array_to_string(runs_on, ','), '-'),
                 'q' || coalesce(queue_timeout_s::text, '-'))
FROM steps WHERE run_id = $1 AND key = $2`, run, key))
	return out
}

// TestFlowOfMapInstances: a map's instances take the map step's flow settings (its
// concurrency limit and key, rate limit, priority, runs_on, queue_timeout), so a
// limit on a map step bounds its items.
func TestFlowOfMapInstances(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	def := `{"steps":[{"key":"m","needs":[],"with":{},"priority":7,"runs_on":["gpu"],"queue_timeout_ms":60000,
		"concurrency":{"name":"tenant","key":"input.tenant","limit":1},
		"rate_limit":{"name":"api","key":"","limit":5,"per_ms":1000}}]}`
	var sum [32]byte
	_, _ = rand.Read(sum[:])
	digest := "sha256:" + hex.EncodeToString(sum[:])
	_, _, err := s.VersionRegister(ctx, &catalog.VersionRegisterParams{
		Workflow: "wf", Digest: digest, Size: 1, BlobKey: "bundles/sha256/" + digest[7:],
		Definition: json.RawMessage(def), Fingerprint: digest, Steps: []catalog.NewStep{{Key: "m", MaxAttempts: 1}},
	})
	require.NoError(t, err)
	run := flowRun(t, ctx, s, "wf", `{"tenant":"acme"}`)
	claimed, _, err := s.StepClaimNext(ctx, "d1", []string{"gpu"}, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.NoError(t, s.MapStart(ctx, lease(claimed[0]), &catalog.MapStartParams{MaxParallel: 10,
		Items: json.RawMessage(`["a","b","c"]`)}))
	_, _, err = s.MapWork(ctx, catalog.MapRef{RunID: run, Key: "m"}, catalog.MapWorker{Finish: listFinisher(t)})
	require.NoError(t, err)
	want := "tenant/acme/1 rate:api//5/1 p7 ongpu q60"
	require.Equal(t, want, flowOf(t, ctx, s, run, "m"))
	for i := range 3 {
		require.Equal(t, want, flowOf(t, ctx, s, run, fmt.Sprintf("m[%d]", i)))
	}
	// The key's one slot: one instance runs at a time, on a gpu dispatcher only.
	claimed, _, err = s.StepClaimNext(ctx, "d2", nil, 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, claimed, "an untagged dispatcher claims no instance")
	claimed, _, err = s.StepClaimNext(ctx, "d1", []string{"gpu"}, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1, "the map step's concurrency limit bounds its instances")
}

// TestFlowOfHandlers: a compensation and an on_failure step take their own flow
// settings (here the compensation's), else the defaults' (the definition's
// on_failure step carries them, as bundle.Normalize writes it); the run's priority,
// given at its start, applies to them as to its other steps.
func TestFlowOfHandlers(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	def := `{"steps":[
		{"key":"s1","needs":[],"with":{},"compensate":{"key":"compensate-s1","with":{},
			"concurrency":{"name":"refunds","key":"input.tenant","limit":1},"queue_timeout_ms":30000}},
		{"key":"boom","needs":["s1"],"with":{}}],
	  "on_failure":[{"key":"notify","with":{},"concurrency":{"name":"wf","key":"","limit":3},
		"rate_limit":{"name":"pager","key":"input.tenant","limit":1,"per_ms":60000},"runs_on":["ops"]}]}`
	var sum [32]byte
	_, _ = rand.Read(sum[:])
	digest := "sha256:" + hex.EncodeToString(sum[:])
	_, _, err := s.VersionRegister(ctx, &catalog.VersionRegisterParams{
		Workflow: "wf", Digest: digest, Size: 1, BlobKey: "bundles/sha256/" + digest[7:],
		Definition: json.RawMessage(def), Fingerprint: digest,
		Steps: []catalog.NewStep{{Key: "s1", MaxAttempts: 1, CompensateAttempts: 1},
			{Key: "boom", Needs: []string{"s1"}, MaxAttempts: 1}},
		OnFailure: []catalog.NewStep{{Key: "notify", MaxAttempts: 1}},
	})
	require.NoError(t, err)
	for i, prio := range []*int{nil, ptr(8)} {
		tenant := []string{"acme", "globex"}[i] // a bucket each: one token a minute
		r, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf",
			Input: json.RawMessage(`{"tenant":"` + tenant + `"}`), Priority: prio})
		require.NoError(t, err)
		succeed(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["s1"])
		fail(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["boom"])
		p := "p5"
		if prio != nil {
			p = "p8"
		}
		require.Equal(t, "refunds/"+tenant+"/1 - "+p+" on- q30", flowOf(t, ctx, s, r.ID, "compensate-s1"))
		require.Equal(t, "wf//3 rate:pager/"+tenant+"/1/60 "+p+" onops q-", flowOf(t, ctx, s, r.ID, "notify"))
		// The compensation runs; notify, on an ops dispatcher only.
		succeed(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["compensate-s1"])
		claimKeys(t, ctx, s, "d1", 0)
		claimed, _, err := s.StepClaimNext(ctx, "d2", []string{"ops"}, 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		succeed(t, ctx, s, claimed[0])
	}
}

func ptr[T any](v T) *T { return &v }

// rateLimitedVersion registers workflow "rl": one step s with the rate limit
// "api", limit tokens an hour per input.acct.
func rateLimitedVersion(t *testing.T, ctx context.Context, s *catalog.Store, limit int) {
	t.Helper()
	var sum [32]byte
	_, _ = rand.Read(sum[:])
	digest := "sha256:" + hex.EncodeToString(sum[:])
	def := fmt.Sprintf(`{"steps":[{"key":"s","needs":[],"with":{},"rate_limit":{"name":"api","key":"input.acct","limit":%d,"per":"1h0m0s","per_ms":3600000}}]}`, limit)
	_, _, err := s.VersionRegister(ctx, &catalog.VersionRegisterParams{
		Workflow: "rl", Digest: digest, Size: 1, BlobKey: "bundles/sha256/" + digest[7:],
		Definition: json.RawMessage(def), Fingerprint: digest, Steps: []catalog.NewStep{{Key: "s", MaxAttempts: 1}},
	})
	require.NoError(t, err)
}
