package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

func (c *cli) newRunStartCmd() *cobra.Command {
	var (
		version        string
		input, idemKey string
		wait           bool
		labels         []string
		priority       int
		deadline       string
	)
	cmd := &cobra.Command{
		Use:   "start NAME",
		Short: "Start a run of a workflow and print its ID",
		Long: `start starts a run of workflow NAME: of the version the alias latest names, or
of --version N, or of the version --version ALIAS names (stable, canary, …). An
alias is resolved when the run is created; the run keeps that version.
--input takes JSON, or @file to read it from a file. --label (-l) key=value, repeated,
labels the run (find it with cairn run list -l key=value). With --wait it follows the
run until it ends, prints its steps, and fails unless the run succeeded.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := parseLabels(labels)
			if err != nil {
				return err
			}
			body := client.StartRunBody{}
			if cmd.Flags().Changed("priority") {
				if priority < 0 || priority > 9 {
					return fmt.Errorf("--priority %d: must be 0 to 9", priority)
				}
				p := int64(priority)
				body.Priority = &p
			}
			if deadline != "" {
				at, err := parseDeadline(deadline, time.Now())
				if err != nil {
					return err
				}
				body.Deadline = &at
			}
			return c.startRun(cmd.Context(), body, args[0], version, input, idemKey, l, wait)
		},
	}
	f := cmd.Flags()
	f.StringVar(&version, "version", "", "version number or alias to run (default: the alias latest)")
	f.StringVar(&input, "input", "", "the run's input: JSON, or @file")
	f.StringVar(&idemKey, "idempotency-key", "", "makes the start safe to retry: the same key returns the first run")
	f.BoolVar(&wait, "wait", false, "follow the run until it ends; fail unless it succeeded")
	f.StringArrayVarP(&labels, "label", "l", nil, "label the run: key=value (repeat for more)")
	f.StringVar(&deadline, "deadline", "", "fail the run (deadline_exceeded) if it has not ended by then: a duration from now (2h) or an RFC 3339 time")
	f.IntVar(&priority, "priority", 0, "the priority of every step of the run, 0..9 (higher first), in place of the steps' own")
	return cmd
}

func (c *cli) startRun(ctx context.Context, body client.StartRunBody, name string, version string, input, idemKey string, labels map[string]string, wait bool) error {
	if len(labels) > 0 {
		body.Labels = &labels
	}
	if err := startVersion(&body, version); err != nil {
		return err
	}
	if input != "" {
		raw, err := readInput(input)
		if err != nil {
			return err
		}
		body.Input = raw
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	run, err := cl.CreateRun(ctx, name, body, idemKey)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, run.Id)
	if !wait {
		return nil
	}
	id, err := parseRunID(run.Id)
	if err != nil {
		return err
	}
	if _, err := cl.WaitRun(ctx, id, client.WaitOptions{Follow: c.followOptions()}); err != nil {
		return stoppedFollowing(id, err)
	}
	return c.showRun(ctx, cl, id, false)
}

// parseDeadline reads --deadline: a duration from now, or an RFC 3339 time.
func parseDeadline(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("--deadline %s: must be in the future", s)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--deadline %q: want a duration (2h) or an RFC 3339 time", s)
	}
	return t, nil
}
