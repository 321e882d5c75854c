package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

func (c *cli) newRunRetryCmd() *cobra.Command {
	var (
		version string
		idemKey string
	)
	cmd := &cobra.Command{
		Use:   "retry ID",
		Short: "Run a failed or canceled run again, keeping its succeeded steps",
		Long: `retry runs a failed or canceled run again, in place: its failed, canceled and
skipped steps run again with a fresh attempt budget (a step resumes from its last
checkpoint); succeeded steps and their outputs are kept and never run again.
With --version N (or an alias: --version stable) the run first moves onto that
version of its workflow (a fixed deploy), which must have every step the run keeps
with the same key and needs.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, cl, err := c.runClient(args[0])
			if err != nil {
				return err
			}
			body := client.RetryRunBody{}
			if body.Version, body.Alias, err = versionFlag(version); err != nil {
				return err
			}
			params := &client.RetryRunParams{}
			if idemKey != "" {
				params.IdempotencyKey = &idemKey
			}
			resp, err := cl.RetryRunWithResponse(cmd.Context(), id, params, body)
			if err != nil {
				return fmt.Errorf("retry run %s: %w", id, err)
			}
			if resp.JSON200 == nil {
				return unexpected("retry run", resp.StatusCode())
			}
			r := resp.JSON200
			fmt.Fprintf(c.stdout, "run %s %s (version %d, %d of %d steps to run)\n", r.Id, r.Status, r.Version, r.StepsRemaining, r.StepsTotal)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&version, "version", "", "move the run onto this version (a number or an alias) of its workflow")
	f.StringVar(&idemKey, "idempotency-key", "", "makes the retry safe to repeat: the same key retries once")
	return cmd
}

func (c *cli) newRunRerunCmd() *cobra.Command {
	var (
		from, input, idemKey string
		version              string
		dryRun               bool
		out                  outputFormat
	)
	cmd := &cobra.Command{
		Use:   "rerun ID --from STEP",
		Short: "Start a new run from a step of a finished run, reusing the outputs before it",
		Long: `rerun starts a new run of a finished run's workflow that reruns it from step
--from: that step and everything downstream of it run fresh (with --input, JSON or
@file, else the first run's input); the steps before it that succeeded are carried
over with their outputs, without running. It prints the plan ("reuse: …", "run: …")
and then the new run's ID; --dry-run prints only the plan and starts nothing.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, cl, err := c.runClient(args[0])
			if err != nil {
				return err
			}
			body := client.RerunRunBody{FromStep: from}
			if input != "" {
				raw, err := readInput(input)
				if err != nil {
					return err
				}
				body.Input = raw
			}
			if body.Version, body.Alias, err = versionFlag(version); err != nil {
				return err
			}
			if dryRun {
				body.DryRun = &dryRun
			}
			params := &client.RerunRunParams{}
			if idemKey != "" {
				params.IdempotencyKey = &idemKey
			}
			resp, err := cl.RerunRunWithResponse(cmd.Context(), id, params, body)
			if err != nil {
				return fmt.Errorf("rerun run %s: %w", id, err)
			}
			res := resp.JSON202
			if res == nil {
				res = resp.JSON200
			}
			if res == nil {
				return unexpected("rerun run", resp.StatusCode())
			}
			if out.json() {
				return writeJSON(c.stdout, res)
			}
			fmt.Fprintf(c.stdout, "reuse: %s\n", keyList(deref(res.Plan.Reused)))
			fmt.Fprintf(c.stdout, "run: %s\n", keyList(deref(res.Plan.Run)))
			if res.Run != nil {
				fmt.Fprintln(c.stdout, res.Run.Id)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the step to rerun from (required)")
	f.StringVar(&input, "input", "", "the new run's input: JSON, or @file (default: the first run's)")
	f.StringVar(&version, "version", "", "run on this version (a number or an alias) of the workflow (default: the first run's)")
	f.BoolVar(&dryRun, "dry-run", false, "print the plan only; start nothing")
	f.StringVar(&idemKey, "idempotency-key", "", "makes the rerun safe to repeat: the same key returns the first rerun")
	_ = cmd.MarkFlagRequired("from")
	out.register(cmd)
	return cmd
}

// keyList joins step keys for the plan, "(none)" for none.
func keyList(keys []string) string {
	if len(keys) == 0 {
		return "(none)"
	}
	return strings.Join(keys, ", ")
}
