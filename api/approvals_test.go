package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
)

const (
	aliceToken = "alice-token-0123456789abcdef"
	bobToken   = "bob-token-0123456789abcdef"
	veraToken  = "vera-token-0123456789abcdef"
	rootToken  = "root-token-0123456789abcdef"
)

// setupApprovers serves the API with named tokens: operators alice and bob, viewer
// vera, admin root, and the unnamed operator token.
func setupApprovers(t *testing.T) *testBundle {
	t.Helper()
	store := catalog.New(testenv.DB(t), nil)
	blobDir := t.TempDir()
	blobs, err := blobstore.NewFile(blobDir, nil)
	require.NoError(t, err)
	tokens, err := api.ParseTokens("operator:" + operatorToken + ",operator:alice:" + aliceToken + ",operator:bob:" + bobToken +
		",viewer:vera:" + veraToken + ",admin:root:" + rootToken)
	require.NoError(t, err)
	hs := httptest.NewServer(api.New(store, blobs, &api.Config{Tokens: tokens, TempDir: t.TempDir()}).Handler())
	t.Cleanup(hs.Close)
	return &testBundle{store: store, blobDir: blobDir, url: hs.URL}
}

// approvalRun deploys workflow "release" (an approval step gate: required 2,
// then ship) and starts a run whose gate a dispatcher has claimed and suspended.
func (tb *testBundle) approvalRun(t *testing.T, roles []string) string {
	t.Helper()
	return tb.approvalRunOf(t, roles, 2)
}

// approvalRunOf is approvalRun with required approvals.
func (tb *testBundle) approvalRunOf(t *testing.T, roles []string, required int) string {
	t.Helper()
	a := tb.send(t, http.MethodPost, "/v1/bundles", map[string]string{"Content-Type": "application/gzip"},
		archive(t, entry{name: "cairn.yaml", body: "name: release\nsteps:\n  - {key: gate, approval: {required: 2}}\n  - {key: ship, needs: [gate], builtin: noop}\n"}))
	require.Contains(t, []int{http.StatusOK, http.StatusCreated}, a.status, "%s", a.body)
	a = tb.send(t, http.MethodPost, "/v1/workflows/release/runs", nil, []byte(`{}`))
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	run := decode[struct {
		ID string `json:"id"`
	}](t, a)
	ctx := context.Background()
	claimed, err := tb.store.StepClaim(ctx, "test", 10, time.Hour)
	require.NoError(t, err)
	// The gate of this run (a step of an earlier run of the test's may be claimed
	// with it).
	i := slices.IndexFunc(claimed, func(c catalog.Claimed) bool { return c.RunID.String() == run.ID && c.Key == "gate" })
	require.NotEqual(t, -1, i, "%v", claimed)
	c := claimed[i]
	require.NoError(t, tb.store.ApprovalSuspend(ctx, catalog.Lease{RunID: c.RunID, Key: c.Key, Token: c.LeaseToken},
		catalog.Approval{Required: required, Roles: roles}))
	return run.ID
}

type decisionAnswer struct {
	Decision string `json:"decision"`
	Counted  bool   `json:"counted"`
	Step     struct {
		Status     string          `json:"status"`
		Output     json.RawMessage `json:"output"`
		LastError  json.RawMessage `json:"last_error"`
		WaitingFor *struct {
			Kind      string `json:"kind"`
			Required  int    `json:"required"`
			Approvals int    `json:"approvals"`
		} `json:"waiting_for"`
	} `json:"step"`
}

// TestApproveTwoOperators: two named operator tokens complete a required-2
// approval; the same one twice counts once; a viewer gets 403; a decision on a
// step that no longer waits is a 409, on an unknown step a 404; the events name
// the approvers.
func TestApproveTwoOperators(t *testing.T) {
	t.Parallel()
	tb := setupApprovers(t)
	id := tb.approvalRun(t, []string{"operator"})
	url := "/v1/runs/" + id + "/steps/gate/"

	a := tb.sendAs(t, aliceToken, http.MethodPost, url+"approve", nil, []byte(`{"comment":"lgtm","input":{"ticket":7}}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	d := decode[decisionAnswer](t, a)
	require.Equal(t, "approved", d.Decision)
	require.True(t, d.Counted)
	require.Equal(t, "suspended", d.Step.Status)
	require.Equal(t, "approval", d.Step.WaitingFor.Kind)
	require.Equal(t, 2, d.Step.WaitingFor.Required)
	require.Equal(t, 1, d.Step.WaitingFor.Approvals)

	a = tb.sendAs(t, aliceToken, http.MethodPost, url+"approve", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	d = decode[decisionAnswer](t, a)
	require.False(t, d.Counted, "the same approver counts once")
	require.Equal(t, 1, d.Step.WaitingFor.Approvals)

	a = tb.sendAs(t, veraToken, http.MethodPost, url+"approve", nil, nil)
	require.Equal(t, http.StatusForbidden, a.status, "%s", a.body)
	require.Equal(t, "forbidden", a.problem.Code)

	a = tb.sendAs(t, bobToken, http.MethodPost, url+"approve", nil, []byte(`{}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	d = decode[decisionAnswer](t, a)
	require.True(t, d.Counted)
	require.Equal(t, "succeeded", d.Step.Status)
	require.Nil(t, d.Step.WaitingFor)
	var out struct {
		ApprovedBy []struct {
			Name    string          `json:"name"`
			Comment string          `json:"comment"`
			Input   json.RawMessage `json:"input"`
			At      string          `json:"at"`
		} `json:"approved_by"`
	}
	require.NoError(t, json.Unmarshal(d.Step.Output, &out))
	require.Len(t, out.ApprovedBy, 2)
	require.Equal(t, "alice", out.ApprovedBy[0].Name)
	require.Equal(t, "lgtm", out.ApprovedBy[0].Comment)
	require.JSONEq(t, `{"ticket":7}`, string(out.ApprovedBy[0].Input))
	require.Equal(t, "bob", out.ApprovedBy[1].Name)

	// The step no longer waits: a new approver gets 409.
	a = tb.send(t, http.MethodPost, url+"approve", nil, nil)
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
	require.Equal(t, "invalid_run_state", a.problem.Code)
	require.Contains(t, a.problem.Detail, "succeeded")
	a = tb.send(t, http.MethodPost, "/v1/runs/"+id+"/steps/nope/approve", nil, nil)
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
	a = tb.send(t, http.MethodPost, url+"approve", nil, []byte(`{"comment":5}`))
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)

	a = tb.send(t, http.MethodGet, "/v1/runs/"+id+"/events", nil, nil)
	require.Equal(t, http.StatusOK, a.status)
	events := decode[struct {
		Items []struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		} `json:"items"`
	}](t, a)
	var actors []any
	for _, e := range events.Items {
		if e.Type == "step.approved" {
			actors = append(actors, e.Data["actor"])
		}
	}
	require.Equal(t, []any{"alice", "bob"}, actors)
}

// TestRejectAndRoles: a step whose roles are [admin] refuses an operator (403)
// and takes the admin's rejection: it fails terminally, code rejected, naming who
// and why.
func TestRejectAndRoles(t *testing.T) {
	t.Parallel()
	tb := setupApprovers(t)
	id := tb.approvalRun(t, []string{"admin"})
	url := "/v1/runs/" + id + "/steps/gate/"

	a := tb.sendAs(t, aliceToken, http.MethodPost, url+"reject", nil, nil)
	require.Equal(t, http.StatusForbidden, a.status, "%s", a.body)
	require.Contains(t, a.problem.Detail, "admin")

	a = tb.sendAs(t, rootToken, http.MethodPost, url+"reject", nil, []byte(`{"comment":"freeze week"}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	d := decode[decisionAnswer](t, a)
	require.Equal(t, "rejected", d.Decision)
	require.Equal(t, "failed", d.Step.Status)
	var e map[string]any
	require.NoError(t, json.Unmarshal(d.Step.LastError, &e))
	require.Equal(t, "rejected", e["code"])
	require.Equal(t, "rejected by root: freeze week", e["message"])

	a = tb.send(t, http.MethodGet, "/v1/runs/"+id, nil, nil)
	require.Equal(t, "failed", decode[map[string]any](t, a)["status"])
	a = tb.sendAs(t, bobToken, http.MethodPost, url+"approve", nil, nil)
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
}

// TestApprovalNeedsNamedApprovers: one person holding the two tokens
// `cairn dev` makes (operator and admin, neither named) met `required: 2`, since an
// unnamed token takes its role's name. Such a token may not approve a step that
// needs more than one approver (403 naming why and how to name tokens), and
// nothing is counted; on a step that needs one it may; named tokens count one
// each, and it may still reject.
func TestApprovalNeedsNamedApprovers(t *testing.T) {
	t.Parallel()
	tb := setupApprovers(t)
	id := tb.approvalRun(t, []string{"operator"})
	url := "/v1/runs/" + id + "/steps/gate/"

	a := tb.send(t, http.MethodPost, url+"approve", nil, []byte(`{}`))
	require.Equal(t, http.StatusForbidden, a.status, "an unnamed operator token: %s", a.body)
	require.Equal(t, "forbidden", a.problem.Code)
	require.Contains(t, a.problem.Detail, "needs 2 distinct approvers")
	require.Contains(t, a.problem.Detail, "role:name:token")
	st, err := tb.store.StepGet(context.Background(), uuid.MustParse(id), "gate")
	require.NoError(t, err)
	require.Equal(t, catalog.StepSuspended, st.Status)
	require.Zero(t, st.Approvals, "nothing was counted")

	a = tb.sendAs(t, aliceToken, http.MethodPost, url+"approve", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.True(t, decode[decisionAnswer](t, a).Counted)
	a = tb.sendAs(t, bobToken, http.MethodPost, url+"approve", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Equal(t, "succeeded", decode[decisionAnswer](t, a).Step.Status, "two named approvers")

	// One approver is enough: an unnamed token may approve.
	one := tb.approvalRunOf(t, []string{"operator"}, 1)
	a = tb.send(t, http.MethodPost, "/v1/runs/"+one+"/steps/gate/approve", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Equal(t, "succeeded", decode[decisionAnswer](t, a).Step.Status)

	// A rejection needs one person: an unnamed token may reject.
	rej := tb.approvalRun(t, []string{"operator"})
	a = tb.send(t, http.MethodPost, "/v1/runs/"+rej+"/steps/gate/reject", nil, []byte(`{"comment":"no"}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Equal(t, "failed", decode[decisionAnswer](t, a).Step.Status)
}

// TestApprovalTwoUnnamedTokens: the operator and admin
// tokens of one holder, both unnamed, approve a required-2 step: refused, and the
// step still waits.
func TestApprovalTwoUnnamedTokens(t *testing.T) {
	t.Parallel()
	tb := setupWith(t, api.Config{})
	id := tb.approvalRun(t, []string{"operator"})
	url := "/v1/runs/" + id + "/steps/gate/approve"
	for _, token := range []string{operatorToken, adminToken} {
		a := tb.sendAs(t, token, http.MethodPost, url, nil, []byte(`{}`))
		require.Equal(t, http.StatusForbidden, a.status, "%s", a.body)
		require.Contains(t, a.problem.Detail, "without a name")
	}
	st, err := tb.store.StepGet(context.Background(), uuid.MustParse(id), "gate")
	require.NoError(t, err)
	require.Equal(t, catalog.StepSuspended, st.Status, "one person with two tokens did not meet required: 2")
}

// TestDecideDecidedStep: approving or rejecting a step that was
// decided already is a 409 invalid_run_state naming the step's state, for an
// approver who decided before too (it answered 200 counted:false); a repeat while
// the step still waits stays 200 counted:false.
func TestDecideDecidedStep(t *testing.T) {
	t.Parallel()
	tb := setupApprovers(t)
	id := tb.approvalRun(t, []string{"operator"})
	url := "/v1/runs/" + id + "/steps/gate/"

	a := tb.sendAs(t, aliceToken, http.MethodPost, url+"approve", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	a = tb.sendAs(t, aliceToken, http.MethodPost, url+"approve", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "a second vote while the step waits: %s", a.body)
	require.False(t, decode[decisionAnswer](t, a).Counted)
	a = tb.sendAs(t, bobToken, http.MethodPost, url+"reject", nil, []byte(`{"comment":"not today"}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Equal(t, "failed", decode[decisionAnswer](t, a).Step.Status)

	for _, tt := range []struct {
		name, token, verb string
	}{
		{"the approver approves again", aliceToken, "approve"},
		{"the approver rejects", aliceToken, "reject"},
		{"the rejecter rejects again", bobToken, "reject"},
		{"the rejecter approves", bobToken, "approve"},
		{"an admin", rootToken, "approve"},
	} {
		a = tb.sendAs(t, tt.token, http.MethodPost, url+tt.verb, nil, nil)
		require.Equal(t, http.StatusConflict, a.status, "%s: %s", tt.name, a.body)
		require.Equal(t, "invalid_run_state", a.problem.Code, tt.name)
		require.Contains(t, a.problem.Detail, "failed (rejected)", tt.name)
		require.Contains(t, a.problem.Detail, "its run has ended (failed)", tt.name)
	}

	// A step whose run was canceled: its approver gets 409 naming it.
	id = tb.approvalRun(t, []string{"operator"})
	url = "/v1/runs/" + id + "/steps/gate/"
	a = tb.sendAs(t, aliceToken, http.MethodPost, url+"approve", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	a = tb.send(t, http.MethodPost, "/v1/runs/"+id+"/cancel", nil, []byte(`{}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	a = tb.sendAs(t, aliceToken, http.MethodPost, url+"approve", nil, nil)
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
	require.Equal(t, "invalid_run_state", a.problem.Code)
	require.Contains(t, a.problem.Detail, "canceled")
}
