package runtime_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/expr"
	"github.com/cairnrun/cairn/runtime"
)

// childOf returns the child run a workflow step started, once it has one.
func childOf(t *testing.T, tb *testBundle, id uuid.UUID, key string) uuid.UUID {
	t.Helper()
	var child uuid.UUID
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st := stepMap(c, tb, id)[key]
		if assert.NotNil(c, st.ChildRun, "step %s has started no child yet (%s)", key, st.Status) {
			child = *st.ChildRun
		}
	}, 10*time.Second, 10*time.Millisecond)
	return child
}

// stepError decodes a step's last error.
func stepError(t *testing.T, tb *testBundle, id uuid.UUID, key string) map[string]any {
	t.Helper()
	var e map[string]any
	require.NoError(t, json.Unmarshal(stepMap(t, tb, id)[key].LastError, &e))
	return e
}

// TestChildRuns: a workflow step starts its child with the input its expression
// gives and suspends (one attempt, no slot held); the child's output is the step's
// output; a child's failure fails the parent step (code child_failed).
func TestChildRuns(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{Concurrency: 1})
	kid := deploy(t, tb, map[string]string{"cairn.yaml": `
name: kid
steps:
  - {key: echo, builtin: echo}
`})
	failing := deploy(t, tb, map[string]string{"cairn.yaml": `
name: failing
steps:
  - {key: boom, builtin: fail}
`})
	parent := deploy(t, tb, map[string]string{"cairn.yaml": `
name: parent
steps:
  - {key: first, builtin: echo, with: {value: {n: 41}}}
  - {key: call, needs: [first], workflow: {name: kid, version: 1, input: "{'n': deps.first.n + 1, 'who': input.who}"}}
  - {key: after, needs: [call], builtin: echo}
`})
	require.Equal(t, 1, kid.Version)

	id := startRun(t, tb, parent, `{"who": "me"}`)
	run := waitRun(t, tb, id, 20*time.Second)
	require.Equal(t, catalog.RunSucceeded, run.Status, "%s", run.Error)
	steps := stepMap(t, tb, id)
	require.JSONEq(t, `{"echo": {"n": 42, "who": "me"}}`, string(steps["call"].Output))
	require.Len(t, attempts(t, tb, id, "call"), 1)
	child, err := tb.store.RunGet(t.Context(), *steps["call"].ChildRun)
	require.NoError(t, err)
	require.Equal(t, id, *child.ParentID)
	require.Equal(t, "call", *child.ParentStep)
	require.Equal(t, 1, child.Version)
	require.Equal(t, catalog.RunSucceeded, child.Status)

	// A child that fails fails the step and the parent run.
	failParent := deploy(t, tb, map[string]string{"cairn.yaml": `
name: fail-parent
steps:
  - {key: call, workflow: {name: failing, version: latest}}
`})
	id = startRun(t, tb, failParent, "")
	require.Equal(t, catalog.RunFailed, waitRun(t, tb, id, 20*time.Second).Status)
	e := stepError(t, tb, id, "call")
	require.Equal(t, "child_failed", e["code"])
	childID := childOf(t, tb, id, "call")
	require.Equal(t, childID.String(), e["run_id"])
	require.Equal(t, catalog.RunFailed, waitRun(t, tb, childID, time.Second).Status)
	require.Equal(t, failing.Workflow, "failing")

	// A bad input expression fails the step with code expression; a child workflow
	// that does not exist, with code child_not_found.
	bad := deploy(t, tb, map[string]string{"cairn.yaml": `
name: bad
steps:
  - {key: call, workflow: {name: kid, input: "input.missing.deeper"}}
  - {key: nowhere, workflow: {name: nowhere, version: stable}}
`})
	id = startRun(t, tb, bad, `{}`)
	require.Equal(t, catalog.RunFailed, waitRun(t, tb, id, 20*time.Second).Status)
	require.Equal(t, expr.Code, stepError(t, tb, id, "call")["code"])
	require.Equal(t, runtime.CodeChildNotFound, stepError(t, tb, id, "nowhere")["code"])
}

// TestChildRunCanceledWithParent: canceling the parent cancels the child (a long
// sleep), and the parent's step with it.
func TestChildRunCanceledWithParent(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	deploy(t, tb, map[string]string{"cairn.yaml": `
name: slow
steps:
  - {key: nap, sleep: 1h}
`})
	parent := deploy(t, tb, map[string]string{"cairn.yaml": `
name: parent
steps:
  - {key: call, workflow: {name: slow}}
`})
	id := startRun(t, tb, parent, "")
	child := childOf(t, tb, id, "call")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, catalog.StepSuspended, stepMap(c, tb, child)["nap"].Status)
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, tb.store.RunCancel(context.Background(), id, "enough"))
	require.Equal(t, catalog.RunCanceled, waitRun(t, tb, child, 10*time.Second).Status)
	require.Equal(t, catalog.StepCanceled, stepMap(t, tb, id)["call"].Status)
}

// TestChildRunDepth: a workflow that starts itself stops at CAIRN_MAX_CHILD_DEPTH
// with code child_limit, and every run up the chain fails.
func TestChildRunDepth(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{Limits: runtime.Limits{MaxChildDepth: 3}})
	v := deploy(t, tb, map[string]string{"cairn.yaml": `
name: forever
steps:
  - {key: again, workflow: {name: forever, version: 1}}
`})
	id := startRun(t, tb, v, "")
	require.Equal(t, catalog.RunFailed, waitRun(t, tb, id, 20*time.Second).Status)
	depth, cur := 0, id
	for {
		st := stepMap(t, tb, cur)["again"]
		if st.ChildRun == nil {
			break
		}
		depth++
		cur = *st.ChildRun
	}
	require.Equal(t, 3, depth, "three levels of children, then the limit")
	e := stepError(t, tb, cur, "again")
	require.Equal(t, runtime.CodeChildLimit, e["code"])
	require.Contains(t, e["message"], "CAIRN_MAX_CHILD_DEPTH")
}

// TestChildRunTreeLimit: a workflow whose map step
// starts itself twice grew a tree of 2 + 4 + … runs, bounded only by depth × the
// children per run. With CAIRN_MAX_TREE_RUNS at 6 the tree holds at most 6 child
// runs, the step over it fails with code child_limit naming the limit, and the
// root run fails.
func TestChildRunTreeLimit(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{Limits: runtime.Limits{MaxChildDepth: 6, MaxTreeRuns: 6}})
	v := deploy(t, tb, map[string]string{"cairn.yaml": `
name: rec
steps:
  - {key: kids, map: {over: "[1, 2]", max_parallel: 2}, workflow: {name: rec, version: 1}}
`})
	id := startRun(t, tb, v, "")
	require.Equal(t, catalog.RunFailed, waitRun(t, tb, id, 60*time.Second).Status)
	var runs int
	require.NoError(t, tb.store.DB().GetContext(context.Background(), &runs, `SELECT count(*) FROM runs WHERE workflow = 'rec'`))
	require.LessOrEqual(t, runs, 1+6, "the root and at most 6 child runs (the depth alone allowed 126)")
	var limited int
	require.NoError(t, tb.store.DB().GetContext(context.Background(), &limited, `
SELECT count(*) FROM steps WHERE last_error->>'code' = $1 AND last_error->>'message' LIKE '%CAIRN_MAX_TREE_RUNS%'`,
		runtime.CodeChildLimit))
	require.Positive(t, limited, "a step failed naming the tree's limit")
}

// TestChildRunQuota: a workflow step whose child's namespace is over its
// runs_per_minute quota starts no child: its attempt fails with code
// quota_exceeded, uncounted (not the step's fault), and the step waits to be
// tried again when the quota has room; the parent run does not fail.
func TestChildRunQuota(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	kid := deploy(t, tb, map[string]string{"cairn.yaml": "name: kid\nsteps:\n  - {key: echo, builtin: echo}\n"})
	parent := deploy(t, tb, map[string]string{"cairn.yaml": "name: parent\nsteps:\n  - {key: call, workflow: {name: kid}}\n"})
	// kid in namespace a, with a quota of one run a minute, taken; a parent in
	// default whose step names it by its key (as the API qualifies a child's name).
	_, err := tb.store.DB().ExecContext(ctx, `INSERT INTO namespaces (name, created_by, updated_by, runs_per_minute) VALUES ('a', 't', 't', 1)`)
	require.NoError(t, err)
	register := func(wf, def, key string) {
		digest := fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(wf)))
		_, _, err := tb.store.VersionRegister(ctx, &catalog.VersionRegisterParams{Workflow: wf, Digest: digest, Size: 1,
			BlobKey: "bundles/sha256/" + digest[7:], Definition: []byte(def), Fingerprint: digest,
			Steps: []catalog.NewStep{{Key: key, MaxAttempts: 1}}})
		require.NoError(t, err)
	}
	register("a/kid", string(kid.Definition), "echo")
	def := strings.Replace(string(parent.Definition), `"workflow": {"name": "kid"}`, `"workflow": {"name": "a/kid"}`, 1)
	require.Contains(t, def, `"a/kid"`)
	register("qparent", def, "call")
	_, _, err = tb.store.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "a/kid"})
	require.NoError(t, err)

	run, _, err := tb.store.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "qparent"})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		as := attempts(c, tb, run.ID, "call")
		if assert.NotEmpty(c, as) {
			assert.Equal(c, catalog.AttemptFailed, as[0].Status)
		}
	}, 20*time.Second, 20*time.Millisecond, "waiting for the step's first attempt to end")
	as := attempts(t, tb, run.ID, "call")
	require.False(t, as[0].Counted, "a quota's refusal is not counted against max_attempts")
	var e map[string]any
	require.NoError(t, json.Unmarshal(as[0].Error, &e))
	require.Equal(t, runtime.CodeQuotaExceeded, e["code"])
	require.Contains(t, e["message"], "runs_per_minute")
	st := stepMap(t, tb, run.ID)["call"]
	require.Equal(t, catalog.StepReady, st.Status, "tried again later")
	require.Nil(t, st.ChildRun)
	r, err := tb.store.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.False(t, r.Status.Terminal())
}
