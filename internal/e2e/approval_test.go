package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

const (
	aliceToken = "e2e-alice-token-0123"
	bobToken   = "e2e-bob-token-012345"
)

// approverEnv gives a server the named operator tokens alice and bob beside the
// stack's own.
var approverEnv = []string{"CAIRN_TOKENS=operator:" + operatorToken + ",viewer:" + viewerToken +
	",operator:alice:" + aliceToken + ",operator:bob:" + bobToken}

// TestApprovalThroughRealServer: a required-2 approval through real `cairn serve`
// processes. The step suspends and holds no slot; the server is SIGKILLed while it
// waits and another takes over; alice's approval (twice: it counts once) and
// bob's complete it, and the run goes on to its end with both named in the output.
// A second workflow's approval with a 1s timeout and on_timeout fail fails with
// code timeout.
func TestApprovalThroughRealServer(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{env: approverEnv})
	s1 := st.start(serverOptions{})
	c := s1.api()
	c.deploy(map[string]string{"cairn.yaml": "name: release\nsteps:\n" +
		"  - {key: gate, approval: {required: 2, timeout: 1h}}\n" +
		"  - {key: ship, needs: [gate], builtin: echo}\n"})
	id := c.startRun("release", 0, nil)
	step := c.waitStep(id, "gate", time.Minute, "suspended for approval", func(s client.Step) bool {
		return s.Status == client.StepStatusSuspended
	})
	require.Equal(t, client.WaitingForKindApproval, step.WaitingFor.Kind)
	require.EqualValues(t, 2, deref(step.WaitingFor.Required))
	require.EqualValues(t, 0, deref(step.WaitingFor.Approvals))
	require.NotNil(t, step.WaitingFor.TimeoutAt)

	// The wait is a row: a crash of the server that suspended it loses nothing.
	s1.kill()
	s2 := st.start(serverOptions{})
	c = s2.api()

	approve := func(token string) *client.DecisionResult {
		t.Helper()
		cl, err := client.New(s2.url, token)
		require.NoError(t, err)
		ctx, cancel := withTimeout(30 * time.Second)
		defer cancel()
		resp, err := cl.ApproveStepWithResponse(ctx, c.runID(id), "gate", client.DecisionBody{})
		require.NoError(t, err)
		require.NotNil(t, resp.JSON200, "status %d: %s", resp.StatusCode(), resp.Body)
		return resp.JSON200
	}
	require.True(t, approve(aliceToken).Counted)
	again := approve(aliceToken)
	require.False(t, again.Counted, "the same approver counts once")
	require.EqualValues(t, 1, deref(again.Step.WaitingFor.Approvals))
	done := approve(bobToken)
	require.Equal(t, client.StepStatusSucceeded, done.Step.Status)

	run := c.waitRun(id, time.Minute)
	require.Equal(t, client.RunStatusSucceeded, run.Status)
	var out struct {
		ApprovedBy []struct {
			Name string `json:"name"`
		} `json:"approved_by"`
	}
	require.NoError(t, json.Unmarshal(c.output(id, "gate"), &out))
	require.Len(t, out.ApprovedBy, 2)
	require.Equal(t, "alice", out.ApprovedBy[0].Name)
	require.Equal(t, "bob", out.ApprovedBy[1].Name)
	var actors []string
	for _, e := range c.events(id) {
		if e.Type == "step.approved" {
			actors = append(actors, approvalEventData(e.Data).Actor)
		}
	}
	require.Equal(t, []string{"alice", "bob"}, actors)

	// A timeout, with on_timeout fail: the step fails, code timeout.
	c.deploy(map[string]string{"cairn.yaml": "name: quick\nsteps:\n  - {key: gate, approval: {timeout: 1s}}\n"})
	id = c.startRun("quick", 0, nil)
	run = c.waitRun(id, time.Minute)
	require.Equal(t, client.RunStatusFailed, run.Status)
	require.Equal(t, "timeout", errorOf(c.mustStep(id, "gate").LastError).Code)
}

// eventData is the data of an approval event.
type eventData struct {
	Actor string `json:"actor"`
}

func approvalEventData(v any) eventData {
	var d eventData
	_ = json.Unmarshal(jsonOf(v), &d)
	return d
}
