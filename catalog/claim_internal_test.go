package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/internal/testenv"
)

// claimAloneVersion registers workflow with one step, "s", whose definition has
// the flow settings flow (JSON members, "" for none).
func claimAloneVersion(t *testing.T, s *Store, workflow, flow string) {
	t.Helper()
	digest := "sha256:" + fmt.Sprintf("%064x", []byte(workflow))[:64]
	def := `{"steps":[{"key":"s","needs":[],"with":{}` + flow + `}]}`
	_, _, err := s.VersionRegister(t.Context(), &VersionRegisterParams{
		Workflow: workflow, Digest: digest, Size: 1, BlobKey: "bundles/sha256/" + digest[7:],
		Definition: json.RawMessage(def), Fingerprint: digest, Steps: []NewStep{{Key: "s", MaxAttempts: 1}},
	})
	require.NoError(t, err)
}

func claimAloneRuns(t *testing.T, s *Store, workflow, input string, n int) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	for range n {
		r, _, err := s.RunCreate(t.Context(), &RunCreateParams{Workflow: workflow, Input: json.RawMessage(input)})
		require.NoError(t, err)
		ids = append(ids, r.ID)
	}
	return ids
}

// runningPerTenant counts the running steps by the tenant of their run's input
// ("-" for none).
func runningPerTenant(t *testing.T, s *Store) map[string]int {
	t.Helper()
	var rows []struct {
		Tenant string `db:"tenant"`
		N      int    `db:"n"`
	}
	require.NoError(t, s.DB().SelectContext(t.Context(), &rows, `
SELECT coalesce(r.input ->> 'tenant', '-') AS tenant, count(*) AS n
FROM steps s JOIN runs r ON r.id = s.run_id WHERE s.status = 'running' GROUP BY 1`))
	out := map[string]int{}
	for _, r := range rows {
		out[r.Tenant] = r.N
	}
	return out
}

// TestClaimAloneConcurrency: the claim in one statement (claimAlone, when no key
// takes turns) starts steps with a concurrency limit itself, as the claim
// transaction's admit would: as many per key as it has free slots (its limit, or
// the one set at run time), a slot free again once its step finished; the keys
// it served take their turn (a key with more ready steps is served now, one with
// none loses its row). A candidate with a rate limit still makes it fall back,
// leasing nothing.
func TestClaimAloneConcurrency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(testenv.DB(t), nil)
	claimAloneVersion(t, s, "limited", `,"concurrency":{"name":"tenant","key":"input.tenant","limit":2}`)
	claimAloneVersion(t, s, "plain", "")
	a := claimAloneRuns(t, s, "limited", `{"tenant":"a"}`, 5)
	claimAloneRuns(t, s, "limited", `{"tenant":"b"}`, 5)
	claimAloneRuns(t, s, "limited", `{"tenant":"c"}`, 1)
	claimAloneRuns(t, s, "plain", `{}`, 3)
	_, err := s.DB().ExecContext(ctx, `UPDATE limit_keys SET served_at = now() - interval '1 minute'`)
	require.NoError(t, err)

	claim := func(want int) []Claimed {
		t.Helper()
		out, _, fallback, _, err := s.claimAlone(ctx, "d1", []string{}, 100, time.Minute, false)
		require.NoError(t, err)
		require.False(t, fallback)
		require.Len(t, out, want)
		return out
	}
	claim(2 + 2 + 1 + 3)
	require.Equal(t, map[string]int{"a": 2, "b": 2, "c": 1, "-": 3}, runningPerTenant(t, s))
	var turns []struct {
		Key    string `db:"key"`
		Recent bool   `db:"recent"`
	}
	require.NoError(t, s.DB().SelectContext(ctx, &turns,
		`SELECT key, served_at > now() - interval '10 seconds' AS recent FROM limit_keys ORDER BY key`))
	require.Equal(t, []struct {
		Key    string `db:"key"`
		Recent bool   `db:"recent"`
	}{{"a", true}, {"b", true}}, turns, "a and b served now, c (nothing left ready) without a row")
	claim(0)

	// A finish frees its slot.
	var holder Claimed
	require.NoError(t, s.DB().GetContext(ctx, &holder, `
SELECT run_id, key, lease_token FROM steps WHERE run_id = ANY ($1::uuid[]) AND status = 'running' LIMIT 1`,
		pq.Array(uuidStrings(a))))
	require.NoError(t, s.StepFinish(ctx, &StepFinishParams{RunID: holder.RunID, Key: holder.Key,
		LeaseToken: holder.LeaseToken, Outcome: OutcomeSucceeded}))
	claim(1)
	require.Equal(t, 2, runningPerTenant(t, s)["a"])

	// A limit raised at run time.
	_, err = s.LimitSet(ctx, "tenant", LimitSetParams{Concurrency: 3}, "alice")
	require.NoError(t, err)
	claim(2)
	require.Equal(t, map[string]int{"a": 3, "b": 3, "c": 1, "-": 3}, runningPerTenant(t, s))

	// A rate limit among the candidates: nothing is leased (though the keys
	// have free slots now), the claim falls back.
	claimAloneVersion(t, s, "rated", `,"rate_limit":{"name":"api","key":"","limit":5,"per_ms":1000}`)
	claimAloneRuns(t, s, "rated", `{}`, 1)
	_, err = s.LimitSet(ctx, "tenant", LimitSetParams{Concurrency: 5}, "alice")
	require.NoError(t, err)
	out, _, fallback, _, err := s.claimAlone(ctx, "d1", []string{}, 100, time.Minute, false)
	require.NoError(t, err)
	require.True(t, fallback)
	require.Empty(t, out)
}

// TestClaimAloneCountsAfterLock: the claim counts a key's running steps after it
// holds the key's lock, in a snapshot of its own. Here a claim waits for the lock
// while another transaction, holding it, starts a step of the key (limit 1) and
// commits: the claim then sees that step and starts none. Counted in the claim
// statement's own snapshot, taken before the wait, it would start a second.
func TestClaimAloneCountsAfterLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(testenv.DB(t), nil)
	claimAloneVersion(t, s, "one", `,"concurrency":{"name":"solo","key":"'k'","limit":1}`)
	ids := claimAloneRuns(t, s, "one", `{}`, 2)

	tx, err := s.DB().BeginTxx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(ctx, `SELECT cairn_limit_lock('{solo}', '{k}')`)
	require.NoError(t, err)

	type result struct {
		out []Claimed
		err error
	}
	done := make(chan result, 1)
	go func() {
		// One candidate: the older run's step, locked by the claim; the other
		// transaction starts the younger's.
		out, _, _, _, err := s.claimAlone(ctx, "d1", []string{}, 1, time.Minute, false)
		done <- result{out, err}
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, s.DB().GetContext(ctx, &waiting,
			`SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_database d ON d.oid = l.database
			  WHERE d.datname = current_database() AND l.locktype = 'advisory' AND NOT l.granted)`))
		return waiting
	}, 10*time.Second, 10*time.Millisecond, "the claim waits for the key's lock")
	_, err = tx.ExecContext(ctx, `
UPDATE steps SET status = 'running', lease_owner = 'other', lease_token = nextval('lease_token_seq'),
    lease_expires_at = now() + interval '1 minute', attempts = 1, counted_attempts = 1
WHERE run_id = $1`, ids[1])
	require.NoError(t, err)
	require.NoError(t, tx.Commit())

	r := <-done
	require.NoError(t, r.err)
	require.Empty(t, r.out, "the key's one slot is taken")
	var running int
	require.NoError(t, s.DB().GetContext(ctx, &running, `SELECT count(*) FROM steps WHERE status = 'running'`))
	require.Equal(t, 1, running)
}

// TestConcSlotsPlans: the statements that count a concurrency key's running steps
// (the claim's hint, GET /v1/limits, a waiting step's blocked_by) read them from
// steps_conc_running_idx even when the statistics were taken with no step running
// (here: an ANALYZE after the runs were created), not by steps_lease_expiry_idx,
// which would read every running step at each count.
func TestConcSlotsPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(testenv.DB(t), nil)
	claimAloneVersion(t, s, "limited", `,"concurrency":{"name":"tenant","key":"run.id","limit":1}`)
	ids := claimAloneRuns(t, s, "limited", `{}`, 200)
	_, err := s.DB().ExecContext(ctx, `ANALYZE steps`)
	require.NoError(t, err)
	plan := func(q string, args ...any) string {
		t.Helper()
		var lines []string
		require.NoError(t, s.DB().SelectContext(ctx, &lines, `EXPLAIN `+q, args...))
		return strings.Join(lines, "\n")
	}
	for name, p := range map[string]string{
		"claim hint":  plan(sqlClaimCandidatesByAge, 64, pq.StringArray{}),
		"limit usage": plan(sqlLimitUsage, "", MaxLimitKeys),
		"blocked by":  plan(sqlStepBlocked, ids[0], DispatcherLive.Seconds()),
	} {
		require.Contains(t, p, "steps_conc_running_idx", "%s:\n%s", name, p)
		require.NotContains(t, p, "steps_lease_expiry_idx", "%s:\n%s", name, p)
	}
}

// TestAdmitConcurrency: the claim transaction admits concurrency-limited
// candidates by the rule of the claim in one statement (sqlConcAdmitted): key by
// key in the candidates' order, a candidate gets a slot when the key's running
// steps and the candidates before it fit under the limit set at run time, or
// else its own; a candidate refused still counts for those after it; one
// without a limit always passes.
func TestAdmitConcurrency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(testenv.DB(t), nil)
	claimAloneVersion(t, s, "limited", `,"concurrency":{"name":"tenant","key":"input.tenant","limit":1}`)
	claimAloneRuns(t, s, "limited", `{"tenant":"busy"}`, 1)
	out, _, fallback, _, err := s.claimAlone(ctx, "d1", []string{}, 10, time.Minute, false)
	require.NoError(t, err)
	require.False(t, fallback)
	require.Len(t, out, 1, "one step of key busy runs")
	_, err = s.LimitSet(ctx, "wide", LimitSetParams{Concurrency: 2}, "alice")
	require.NoError(t, err)

	cand := func(id, name, key string, limit int) claimCandidate {
		c := claimCandidate{Key: &id}
		if name != "" {
			c.ConcName, c.ConcKey, c.ConcLimit = &name, &key, &limit
		}
		return c
	}
	cands := []claimCandidate{
		cand("busy-1", "tenant", "busy", 2), // 1 running + 1st ≤ 2: in
		cand("busy-2", "tenant", "busy", 2), // 1 + 2nd > 2: out
		cand("free", "", "", 0),             // no limit: in
		cand("busy-3", "tenant", "busy", 4), // 1 + 3rd ≤ 4: in (its own limit)
		cand("idle-1", "tenant", "idle", 1), // 0 + 1st ≤ 1: in
		cand("idle-2", "tenant", "idle", 1), // 0 + 2nd > 1: out
		cand("wide-1", "wide", "k", 1),      // limit set at run time, 2: in
		cand("wide-2", "wide", "k", 1),      // in
		cand("wide-3", "wide", "k", 9),      // 0 + 3rd > 2: out
	}
	tx, err := s.DB().BeginTxx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	admitted, err := admitConcurrency(ctx, tx, cands)
	require.NoError(t, err)
	var got []string
	for _, c := range admitted {
		got = append(got, *c.Key)
	}
	require.Equal(t, []string{"busy-1", "free", "busy-3", "idle-1", "wide-1", "wide-2"}, got)
}
