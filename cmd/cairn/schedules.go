package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

// newScheduleCmd is `cairn schedule list|pause|resume|trigger|backfill`.
func newScheduleCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	var workflow string
	cmd := listGroup{
		use: "schedule", alias: "schedules", short: "Inspect and control the schedules of workflows' manifests",
		listUse: "list", listShort: "List schedules (of every workflow, or of --workflow)", args: cobra.NoArgs,
		list: func(c *cli, ctx context.Context, _ []string, limit int, out outputFormat) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			p := &client.ListSchedulesParams{Limit: pageSize(limit)}
			if workflow != "" {
				p.Workflow = &workflow
			}
			return printList(c, cl.SchedulePages(ctx, p), limit, out, func(r *client.ListSchedulesResponse) ([]client.Schedule, []byte) {
				return deref(r.JSON200.Items), r.Body
			}, "ID\tWORKFLOW\tNAME\tCRON\tTIMEZONE\tOVERLAP\tSTATE\tNEXT FIRE\tLAST FIRE\tVERSION", func(s client.Schedule) string {
				state := "active"
				switch {
				case !s.Active:
					state = "inactive"
				case s.Paused:
					state = "paused"
				}
				return fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d", s.Id, s.Workflow, s.Name, s.Cron, s.Timezone,
					s.Overlap, state, optTime(s.NextFireAt), optTime(s.LastFireAt), s.Version)
			})
		},
		more: []func(c *cli) *cobra.Command{
			func(c *cli) *cobra.Command { return c.newSchedulePauseCmd(true) },
			func(c *cli) *cobra.Command { return c.newSchedulePauseCmd(false) },
			(*cli).newScheduleTriggerCmd,
			(*cli).newScheduleBackfillCmd,
		},
	}.command(e, stdout, stderr)
	for _, sub := range cmd.Commands() {
		if sub.Name() == "list" {
			sub.Flags().StringVar(&workflow, "workflow", "", "only this workflow's schedules")
		}
	}
	return cmd
}

func optTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return formatTime(*t)
}

const scheduleArgHelp = `SCHEDULE is the schedule's id (cairn schedule list) or WORKFLOW/NAME.`

// scheduleID resolves a SCHEDULE argument: an id, or WORKFLOW/NAME (looked up in
// the workflow's schedules).
func (c *cli) scheduleID(ctx context.Context, cl *client.Client, arg string) (int64, error) {
	if id, err := strconv.ParseInt(arg, 10, 64); err == nil && id > 0 {
		return id, nil
	}
	wf, name, ok := strings.Cut(arg, "/")
	if !ok || wf == "" || name == "" {
		return 0, fmt.Errorf("schedule %q: want an id or WORKFLOW/NAME", arg)
	}
	for page, err := range cl.SchedulePages(ctx, &client.ListSchedulesParams{Workflow: &wf}) {
		if err != nil {
			return 0, err
		}
		for _, s := range deref(page.JSON200.Items) {
			if s.Name == name {
				return s.Id, nil
			}
		}
	}
	return 0, fmt.Errorf("workflow %s has no schedule %q", wf, name)
}

func (c *cli) printSchedule(s *client.Schedule) error {
	state := "active"
	switch {
	case !s.Active:
		state = "inactive"
	case s.Paused:
		state = "paused"
	}
	_, err := fmt.Fprintf(c.stdout, "schedule %d %s/%s %s (next fire %s)\n", s.Id, s.Workflow, s.Name, state, optTime(s.NextFireAt))
	return err
}

func (c *cli) newSchedulePauseCmd(pause bool) *cobra.Command {
	use, short := "resume SCHEDULE", "Resume a schedule: it fires again from its next fire time after now"
	if pause {
		use, short = "pause SCHEDULE", "Pause a schedule: it fires nothing until resumed"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long:  short + ".\n" + scheduleArgHelp,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			id, err := c.scheduleID(cmd.Context(), cl, args[0])
			if err != nil {
				return err
			}
			var s *client.Schedule
			var status int
			if pause {
				resp, err := cl.PauseScheduleWithResponse(cmd.Context(), id)
				if err != nil {
					return fmt.Errorf("pause schedule %d: %w", id, err)
				}
				s, status = resp.JSON200, resp.StatusCode()
			} else {
				resp, err := cl.ResumeScheduleWithResponse(cmd.Context(), id)
				if err != nil {
					return fmt.Errorf("resume schedule %d: %w", id, err)
				}
				s, status = resp.JSON200, resp.StatusCode()
			}
			if s == nil {
				return unexpected(use[:strings.IndexByte(use, ' ')]+" schedule", status)
			}
			return c.printSchedule(s)
		},
	}
}

func (c *cli) newScheduleTriggerCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "trigger SCHEDULE",
		Short: "Start a run of a schedule now, whatever its overlap policy",
		Long: `trigger starts a run of the schedule now: its version, input and label
schedule=<name>, whatever its overlap policy and even when it is paused. Its fire
times do not change.
` + scheduleArgHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			id, err := c.scheduleID(cmd.Context(), cl, args[0])
			if err != nil {
				return err
			}
			resp, err := cl.TriggerScheduleWithResponse(cmd.Context(), id)
			if err != nil {
				return fmt.Errorf("trigger schedule %d: %w", id, err)
			}
			if resp.JSON202 == nil {
				return unexpected("trigger schedule", resp.StatusCode())
			}
			r := resp.JSON202
			_, err = fmt.Fprintf(c.stdout, "run %s %s (%s version %d)\n", r.Id, r.Status, r.Workflow, r.Version)
			return err
		},
	}
}

func (c *cli) newScheduleBackfillCmd() *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "backfill SCHEDULE --from TIME --to TIME",
		Short: "Create the runs of a schedule's fire times in [--from, --to)",
		Long: `backfill creates a run for every fire time of the schedule in [--from, --to),
each with the idempotency key of that fire: fire times that have their run already
(fired, or backfilled before) create nothing, so a repeat creates nothing new.
Times are RFC 3339 ("2026-03-01T00:00:00Z", "2026-03-01T00:00:00+01:00") or a date
("2026-03-01", midnight UTC). At most 10,000 fire times at once.
` + scheduleArgHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := parseBackfillTime("--from", from)
			if err != nil {
				return err
			}
			t, err := parseBackfillTime("--to", to)
			if err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			id, err := c.scheduleID(cmd.Context(), cl, args[0])
			if err != nil {
				return err
			}
			resp, err := cl.BackfillScheduleWithResponse(cmd.Context(), id, client.BackfillBody{From: f, To: t})
			if err != nil {
				return fmt.Errorf("backfill schedule %d: %w", id, err)
			}
			if resp.JSON200 == nil {
				return unexpected("backfill schedule", resp.StatusCode())
			}
			r := resp.JSON200
			_, err = fmt.Fprintf(c.stdout, "%d fire times: %d runs created, %d skipped (had their run already)\n", r.Fires, r.Created, r.Skipped)
			return err
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "first time, included (RFC 3339 or YYYY-MM-DD); required")
	cmd.Flags().StringVar(&to, "to", "", "last time, excluded (RFC 3339 or YYYY-MM-DD); required")
	_ = cmd.MarkFlagRequired("from")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func parseBackfillTime(flag, v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%s %q: want an RFC 3339 time or a date (YYYY-MM-DD)", flag, v)
}
