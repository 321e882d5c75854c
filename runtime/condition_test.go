package runtime_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/expr"
	"github.com/cairnrun/cairn/runtime"
)

// TestConditionsRun: a diamond whose branch b is skipped by its when (evaluated
// over deps, input and labels) and whose join follows none_failed succeeds; b has
// no attempt. A when that fails at run time fails its step with code expression.
func TestConditionsRun(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	v := deploy(t, tb, map[string]string{"cairn.yaml": `
name: diamond
steps:
  - {key: a, builtin: echo, with: {value: {n: 2}}}
  - {key: b, needs: [a], builtin: echo, with: {value: big}, when: "deps.a.n > input.limit"}
  - {key: c, needs: [a], builtin: echo, with: {value: small}, when: "deps.a.n <= input.limit && run.workflow == 'diamond'"}
  - {key: d, needs: [b, c], builtin: echo, with: {value: joined}, after: none_failed}
  - {key: e, needs: [b], builtin: noop}
`})
	id := startRun(t, tb, v, `{"limit": 5}`)
	run := waitRun(t, tb, id, 20*time.Second)
	require.Equal(t, catalog.RunSucceeded, run.Status)
	steps := stepMap(t, tb, id)
	require.Equal(t, catalog.StepSkipped, steps["b"].Status)
	require.Equal(t, catalog.SkipConditionFalse, *steps["b"].SkipReason)
	require.Empty(t, attempts(t, tb, id, "b"), "a false condition makes no attempt")
	require.Equal(t, catalog.StepSucceeded, steps["c"].Status)
	require.Equal(t, catalog.ConditionTrue, *steps["c"].Condition)
	require.JSONEq(t, `"joined"`, string(steps["d"].Output))
	require.Equal(t, catalog.StepSkipped, steps["e"].Status)
	require.Equal(t, catalog.SkipUpstreamSkipped, *steps["e"].SkipReason)

	bad := deploy(t, tb, map[string]string{"cairn.yaml": `
name: bad-when
steps:
  - {key: a, builtin: noop, when: "input.missing.deeper > 1"}
`})
	id = startRun(t, tb, bad, `{}`)
	require.Equal(t, catalog.RunFailed, waitRun(t, tb, id, 20*time.Second).Status)
	st := stepMap(t, tb, id)["a"]
	var e map[string]any
	require.NoError(t, json.Unmarshal(st.LastError, &e))
	require.Equal(t, expr.Code, e["code"])
	require.Empty(t, attempts(t, tb, id, "a"))
}

// TestCompensationRun: s3 fails, so the compensations of s2 then s1 run (each
// after the other, each seeing the output of the step it undoes and the
// failure), then the on_failure step with the failure in its envelope; the run
// fails with s3's error.
func TestCompensationRun(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": `
name: saga
on_failure:
  - {key: notify, exec: ["./bin/envelope"]}
steps:
  - {key: s1, builtin: echo, with: {value: one}, compensate: {exec: ["./bin/envelope"]}}
  - {key: s2, needs: [s1], builtin: echo, with: {value: two}, compensate: {exec: ["./bin/envelope"]}}
  - {key: s3, needs: [s2], builtin: fail, with: {times: 5}}
`,
		"bin/envelope": "#!/bin/sh\ncat\n",
	})
	id := startRun(t, tb, v, "")
	run := waitRun(t, tb, id, 30*time.Second)
	require.Equal(t, catalog.RunFailed, run.Status)
	var rerr map[string]any
	require.NoError(t, json.Unmarshal(run.Error, &rerr))
	require.Equal(t, "s3", rerr["step"])
	require.NotContains(t, rerr, "handlers_failed")

	steps := stepMap(t, tb, id)
	c2, c1, n := steps["compensate-s2"], steps["compensate-s1"], steps["notify"]
	for _, st := range []catalog.Step{c2, c1, n} {
		require.Equal(t, catalog.StepSucceeded, st.Status, st.Key)
		require.Len(t, attempts(t, tb, id, st.Key), 1, st.Key)
	}
	require.False(t, c1.StartedAt.Before(*c2.FinishedAt), "s2 is compensated before s1")
	require.False(t, n.StartedAt.Before(*c1.FinishedAt), "on_failure after the compensations")

	var env struct {
		Step    string                     `json:"step"`
		Deps    map[string]json.RawMessage `json:"deps"`
		Failure struct {
			Steps []struct {
				Key string `json:"key"`
			} `json:"steps"`
			Compensations []struct {
				Key, Status string
			} `json:"compensations"`
		} `json:"failure"`
	}
	require.NoError(t, json.Unmarshal(c2.Output, &env))
	require.Equal(t, "compensate-s2", env.Step)
	require.JSONEq(t, `"two"`, string(env.Deps["s2"]))
	require.NoError(t, json.Unmarshal(n.Output, &env))
	require.Equal(t, "notify", env.Step)
	require.Len(t, env.Failure.Steps, 1)
	require.Equal(t, "s3", env.Failure.Steps[0].Key)
	require.Len(t, env.Failure.Compensations, 2)
	require.Equal(t, "compensate-s2", env.Failure.Compensations[0].Key)
	require.Equal(t, "succeeded", env.Failure.Compensations[1].Status)

	events, err := tb.store.EventList(t.Context(), id, 0, 1000)
	require.NoError(t, err)
	var types []catalog.EventType
	for _, e := range events {
		types = append(types, e.Type)
	}
	require.Contains(t, types, catalog.EventRunCompensating)
}
