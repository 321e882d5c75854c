package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

func (c *cli) newRunCancelCmd() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a run: pending steps are canceled, running ones killed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, cl, err := c.runClient(args[0])
			if err != nil {
				return err
			}
			body := client.CancelRunRequest{}
			if reason != "" {
				body.Reason = &reason
			}
			resp, err := cl.CancelRunWithResponse(cmd.Context(), id, body)
			if err != nil {
				return fmt.Errorf("cancel run %s: %w", id, err)
			}
			if resp.JSON200 == nil {
				return unexpected("cancel run", resp.StatusCode())
			}
			fmt.Fprintf(c.stdout, "run %s %s\n", resp.JSON200.Id, resp.JSON200.Status)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded on the run")
	return cmd
}

// newRunPauseCmd is `cairn run pause ID` (pause) or `cairn run resume ID`.
func (c *cli) newRunPauseCmd(pause bool) *cobra.Command {
	var reason string
	use, short := "resume ID", "Resume a paused run: its steps start again"
	if pause {
		use, short = "pause ID", "Pause a run: no new attempt starts, running ones finish"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, cl, err := c.runClient(args[0])
			if err != nil {
				return err
			}
			body := client.ControlBody{}
			if reason != "" {
				body.Reason = &reason
			}
			var run *client.Run
			var status int
			if pause {
				resp, err := cl.PauseRunWithResponse(cmd.Context(), id, body)
				if err != nil {
					return fmt.Errorf("pause run %s: %w", id, err)
				}
				run, status = resp.JSON200, resp.StatusCode()
			} else {
				resp, err := cl.ResumeRunWithResponse(cmd.Context(), id, body)
				if err != nil {
					return fmt.Errorf("resume run %s: %w", id, err)
				}
				run, status = resp.JSON200, resp.StatusCode()
			}
			if run == nil {
				return unexpected(strings.Fields(use)[0]+" run", status)
			}
			fmt.Fprintf(c.stdout, "run %s %s%s\n", run.Id, run.Status, pauseReasonNote(run))
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the run's events")
	return cmd
}

// pauseReasonNote says why a paused run is paused, for a line about the run.
func pauseReasonNote(r *client.Run) string {
	if r.PauseReason == nil {
		return ""
	}
	return " (" + map[client.RunPauseReason]string{
		client.RunPauseReasonRun:       "by an operator",
		client.RunPauseReasonWorkflow:  "with its workflow",
		client.RunPauseReasonExhausted: "a step used up its attempts: resume to run it again",
	}[*r.PauseReason] + ")"
}
