package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

func (c *cli) newRunListCmd() *cobra.Command {
	var (
		filter runFilterFlags
		limit  int
		out    outputFormat
		act    = map[string]*bool{}
		all    bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first; or act on every run the filter matches (--cancel, --retry, --pause, --resume)",
		Long: `list lists runs, newest first, that match every filter given:
  cairn run list -l tenant=acme --status failed --since 24h
--since and --until take a Go duration back from now (24h, 90m) or an RFC 3339 time;
--version needs --workflow; --error-code matches the code of the step error that failed
a run (its error.cause.code).

With --cancel, --retry, --pause or --resume it acts on every run the filters match
instead (a bulk operation on the server), followed with a progress bar:
  cairn run list --workflow orders --status failed --retry`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			params, err := filter.params(time.Now())
			if err != nil {
				return err
			}
			for _, action := range bulkActions {
				if *act[action] {
					return c.bulk(cmd.Context(), action, bulkFilter(params), all)
				}
			}
			return c.listRuns(cmd.Context(), params, limit, out)
		},
	}
	f := cmd.Flags()
	filter.register(f)
	f.IntVar(&limit, "limit", 100, "show at most this many (0: all)")
	for _, action := range bulkActions {
		act[action] = f.Bool(action, false, action+" every run the filter matches (a bulk operation on the server, followed with a progress bar)")
	}
	cmd.MarkFlagsMutuallyExclusive(bulkActions...)
	f.BoolVar(&all, "all", false, "with --cancel, --retry, --pause or --resume and no filter: act on every run")
	out.register(cmd)
	return cmd
}

func (c *cli) listRuns(ctx context.Context, params *client.ListRunsParams, limit int, out outputFormat) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	params.Limit = pageSize(limit)
	now := time.Now()
	return printList(c, cl.RunPages(ctx, params), limit, out, func(r *client.ListRunsResponse) ([]client.Run, []byte) {
		return deref(r.JSON200.Items), r.Body
	}, "ID\tWORKFLOW\tVERSION\tSTATUS\tSTEPS\tCREATED\tDURATION\tLABELS", func(r client.Run) string {
		return fmt.Sprintf("%s\t%s\t%d\t%s\t%d/%d\t%s\t%s\t%s", r.Id, r.Workflow, r.Version, r.Status,
			r.StepsTotal-r.StepsRemaining, r.StepsTotal, formatTime(r.CreatedAt), span(r.StartedAt, r.FinishedAt, now),
			formatLabels(r.Labels))
	})
}
