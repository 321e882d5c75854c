package api

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cairnrun/cairn/catalog"
)

// maxDecisionBody bounds the body of an approve or reject: a comment and a small
// JSON input, stored inline with the decision.
const maxDecisionBody = 64 << 10

// DecisionBody is the body of POST /v1/runs/{id}/steps/{key}/approve and …/reject.
type DecisionBody struct {
	Comment string          `json:"comment,omitempty" maxLength:"4096" doc:"why; recorded with the decision, in the step's output (approve) or error (reject)"`
	Input   json.RawMessage `json:"input,omitempty" doc:"any JSON value the approver adds; in the step's output under approved_by[].input"`
}

// DecisionResult is the answer of an approve or reject.
type DecisionResult struct {
	Decision string `json:"decision" enum:"approved,rejected" doc:"the approver's decision on the step: this one, or the first one when counted is false"`
	Counted  bool   `json:"counted" doc:"false when this approver had decided before on the step, which still waits: the same approver counts once, nothing was recorded"`
	Step     Step   `json:"step" doc:"the step now: suspended (waiting_for says how many approvals are in), succeeded or failed"`
}

type decisionOutput struct {
	Body DecisionResult
}

// identity is who a request acts as (its token's role and name).
func identity(ctx context.Context) Identity {
	who, _ := ctx.Value(identityKey).(Identity)
	return who
}

func (s *Server) registerApprovals() {
	for _, op := range []struct {
		id, verb string
		decision catalog.Decision
		summary  string
		about    string
	}{
		{"approveStep", "approve", catalog.DecisionApproved, "Approve an approval step",
			"Records the token's approval of an approval step that waits (`waiting_for.kind` approval). When `required` distinct approvers have approved, the step succeeds with `{\"approved_by\": [{name, comment, input, at}…]}`. Approvers are told apart by their token's name: the same approver counts once, and while the step still waits a repeat answers their first decision with `counted: false`. A token without a name (CAIRN_TOKENS `role:token`) acts as its role's name, which every such token shares, so it may approve only a step whose `required` is 1: on any other it is refused with 403 forbidden, as is a token whose role is not among the step's `roles` (admin always may). A step that does not wait for approval (approved or rejected already, failed, timed out, canceled, or its run ended) is a 409 invalid_run_state whose detail names its state, for a repeat too. One event step.approved names the actor."},
		{"rejectStep", "reject", catalog.DecisionRejected, "Reject an approval step",
			"Records the token's rejection of an approval step that waits: the step fails at once, terminal (no retry), with error code `rejected` naming the approver and the comment; its dependents are skipped. Any token of the step's roles may reject, named or not (one rejection is enough). An approver who approved before, while the step still waits, is answered with that approval (`counted: false`). Roles and states as for approve: a step decided already is a 409 invalid_run_state naming its state. One event step.rejected names the actor, then step.failed."},
	} {
		register(s, huma.Operation{
			OperationID:  op.id,
			Method:       http.MethodPost,
			Path:         "/v1/runs/{id}/steps/{key}/" + op.verb,
			Summary:      op.summary,
			Description:  op.about,
			Tags:         []string{"runs"},
			MaxBodyBytes: maxDecisionBody,
		}, RoleOperator, []problemClass{classBadRequest, classNotFound, classInvalidRunState},
			func(ctx context.Context, in *struct {
				StepParams
				Body *DecisionBody
			}) (*decisionOutput, error) {
				id, err := in.uuid()
				if err != nil {
					return nil, err
				}
				var body DecisionBody
				if in.Body != nil {
					body = *in.Body
				}
				who := identity(ctx)
				res, err := s.store.StepDecide(ctx, &catalog.StepDecision{RunID: id, Key: in.Key, Approver: who.Name,
					Role: who.Role.String(), Unnamed: who.Unnamed, Decision: op.decision, Comment: body.Comment, Input: body.Input})
				if err != nil {
					return nil, catalogDetail(err)
				}
				st, err := s.store.StepGet(ctx, id, in.Key)
				if err != nil {
					return nil, err
				}
				return &decisionOutput{Body: DecisionResult{Decision: string(res.Decision), Counted: res.Counted, Step: stepOf(st)}}, nil
			})
	}
}

// forbiddenDetail is the detail of a catalog refusal for the caller's role.
func forbiddenDetail(err error) string {
	return cmp.Or(detailOr(err, ""), catalog.Reason(err), "the token's role may not do this")
}
