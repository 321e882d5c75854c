package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

// quotaFlag is a quota given on the command line: a positive number, or 0 or
// "none" to clear it.
type quotaFlag struct {
	set   bool
	limit *int
}

func (q *quotaFlag) String() string {
	switch {
	case !q.set:
		return ""
	case q.limit == nil:
		return "none"
	}
	return strconv.Itoa(*q.limit)
}

func (q *quotaFlag) Set(s string) error {
	q.set = true
	if s == "none" || s == "0" {
		q.limit = nil
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return fmt.Errorf("%q is not a positive number, 0 or none", s)
	}
	q.limit = &n
	return nil
}

func (q *quotaFlag) Type() string { return "N|none" }

func newNamespaceSetQuotaCmd(c *cli) *cobra.Command {
	var running, perMinute quotaFlag
	cmd := &cobra.Command{
		Use:   "set-quota NAME [--running-steps N] [--runs-per-minute N]",
		Short: "Change a namespace's quotas (admin)",
		Long: `set-quota sets the quotas of namespace NAME; 0 or none clears one, and one not given
keeps its value. --running-steps bounds the steps of the namespace's runs running at
once on every server: a step over it waits, ready, until a running one ends (running
steps keep running when the quota is lowered). --runs-per-minute bounds the runs the
namespace creates in any minute: a start over it is refused (429 quota_exceeded, with
Retry-After). The default namespace takes no quota. Needs an admin token.`,
		Example: `  cairn namespace set-quota acme --running-steps 5 --runs-per-minute 600
  cairn namespace set-quota acme --running-steps none`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]*int{}
			if running.set {
				body["running_steps"] = running.limit
			}
			if perMinute.set {
				body["runs_per_minute"] = perMinute.limit
			}
			if len(body) == 0 {
				return fmt.Errorf("set quotas of %s: give --running-steps, --runs-per-minute, or both", args[0])
			}
			raw, err := json.Marshal(body)
			if err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			resp, err := cl.PutNamespaceQuotasWithBodyWithResponse(cmd.Context(), args[0], "application/json", bytes.NewReader(raw))
			if err != nil {
				return fmt.Errorf("set quotas of %s: %w", args[0], err)
			}
			if resp.JSON200 == nil {
				return unexpected("set quotas", resp.StatusCode())
			}
			return printQuotas(c, resp.JSON200)
		},
	}
	cmd.Flags().Var(&running, "running-steps", "the most steps running at once (0 or none: no quota)")
	cmd.Flags().Var(&perMinute, "runs-per-minute", "the most runs created in any minute (0 or none: no quota)")
	return cmd
}

func newNamespaceGetQuotaCmd(c *cli) *cobra.Command {
	var out outputFormat
	cmd := &cobra.Command{
		Use:   "get-quota NAME",
		Short: "Show a namespace's quotas and their use (admin)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			resp, err := cl.GetNamespaceQuotasWithResponse(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("get quotas of %s: %w", args[0], err)
			}
			if resp.JSON200 == nil {
				return unexpected("get quotas", resp.StatusCode())
			}
			if out.json() {
				_, err := c.stdout.Write(resp.Body)
				return err
			}
			return printQuotas(c, resp.JSON200)
		},
	}
	out.register(cmd)
	return cmd
}

// printQuotas prints a namespace's quotas, each with its use.
func printQuotas(c *cli, q *client.NamespaceQuotas) error {
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "QUOTA\tLIMIT\tIN USE")
	fmt.Fprintf(tw, "running_steps\t%s\t%d running\n", quotaText(q.RunningSteps), q.Running)
	fmt.Fprintf(tw, "runs_per_minute\t%s\t%d in the last minute\n", quotaText(q.RunsPerMinute), q.RunsLastMinute)
	fmt.Fprintf(tw, "# namespace %s, changed by %s at %s\n", q.Namespace, q.UpdatedBy, formatTime(q.UpdatedAt))
	return tw.Flush()
}

func quotaText(n *int64) string {
	if n == nil {
		return "none"
	}
	return strconv.FormatInt(*n, 10)
}
