package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

// newRunDecideCmd is `cairn run approve ID STEP` (approve) or `cairn run reject ID
// STEP`: the token's decision on an approval step.
func (c *cli) newRunDecideCmd(approve bool) *cobra.Command {
	var comment, input string
	verb, short := "reject", "Reject an approval step: it fails at once (code rejected)"
	if approve {
		verb, short = "approve", "Approve an approval step: it succeeds when its required approvals are in"
	}
	cmd := &cobra.Command{
		Use:   verb + " ID STEP",
		Short: short,
		Long: short + ".\n\nThe decision is the token's: its name is the approver, who counts once. " +
			"The token's role must be among the step's roles (admin always may).",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, cl, err := c.runClient(args[0])
			if err != nil {
				return err
			}
			body := client.DecisionBody{}
			if comment != "" {
				body.Comment = &comment
			}
			if input != "" {
				raw, err := readInput(input)
				if err != nil {
					return err
				}
				var v any
				if err := json.Unmarshal(raw, &v); err != nil {
					return fmt.Errorf("--input: %w", err)
				}
				body.Input = v
			}
			var res *client.DecisionResult
			var status int
			if approve {
				resp, err := cl.ApproveStepWithResponse(cmd.Context(), id, args[1], body)
				if err != nil {
					return fmt.Errorf("approve step %s of run %s: %w", args[1], id, err)
				}
				res, status = resp.JSON200, resp.StatusCode()
			} else {
				resp, err := cl.RejectStepWithResponse(cmd.Context(), id, args[1], body)
				if err != nil {
					return fmt.Errorf("reject step %s of run %s: %w", args[1], id, err)
				}
				res, status = resp.JSON200, resp.StatusCode()
			}
			if res == nil {
				return unexpected(verb+" step", status)
			}
			fmt.Fprintln(c.stdout, decisionLine(id.String(), args[1], res))
			return nil
		},
	}
	cmd.Flags().StringVar(&comment, "comment", "", "why, recorded with the decision")
	cmd.Flags().StringVar(&input, "input", "", "a JSON value to add to the decision (in the step's output), or @file")
	return cmd
}

// decisionLine says what a decision did.
func decisionLine(run, step string, r *client.DecisionResult) string {
	st := r.Step
	var what string
	switch {
	case !r.Counted:
		what = fmt.Sprintf("already %s by this token (an approver counts once)", r.Decision)
	default:
		what = string(r.Decision)
	}
	state := string(st.Status)
	if w := st.WaitingFor; st.Status == client.StepStatusSuspended && w != nil && w.Required != nil && w.Approvals != nil {
		state = fmt.Sprintf("waiting for approval: %d of %d", *w.Approvals, *w.Required)
	}
	return fmt.Sprintf("step %s of run %s: %s; the step is %s", step, run, what, state)
}
