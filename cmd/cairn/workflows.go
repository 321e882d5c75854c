package main

import (
	"context"
	"fmt"
	"io"
	"iter"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

func newWorkflowsCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	return listGroup{
		use: "workflows", alias: "workflow", short: "Inspect workflows",
		listUse: "list", listShort: "List workflows by name", args: cobra.NoArgs,
		list: func(c *cli, ctx context.Context, _ []string, limit int, out outputFormat) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			pages := cl.WorkflowPages(ctx, &client.ListWorkflowsParams{Limit: pageSize(limit)})
			return printList(c, pages, limit, out, func(r *client.ListWorkflowsResponse) ([]client.Workflow, []byte) {
				return deref(r.JSON200.Items), r.Body
			}, "NAME\tLATEST\tUPDATED\tPAUSED\tDESCRIPTION", func(w client.Workflow) string {
				paused := "-"
				if w.Paused {
					paused = "paused"
				}
				return fmt.Sprintf("%s\t%d\t%s\t%s\t%s", w.Name, w.LatestVersion, formatTime(w.UpdatedAt), paused, shorten(w.Description, 72))
			})
		},
		more: []func(c *cli) *cobra.Command{
			aliasesCmd,
			func(c *cli) *cobra.Command { return c.newWorkflowPauseCmd(true) },
			func(c *cli) *cobra.Command { return c.newWorkflowPauseCmd(false) },
		},
	}.command(e, stdout, stderr)
}

// newWorkflowPauseCmd is `cairn workflow pause NAME` (pause) or `cairn workflow
// resume NAME`.
func (c *cli) newWorkflowPauseCmd(pause bool) *cobra.Command {
	var reason string
	use, short := "resume NAME", "Resume a workflow: new runs start, the runs its pause held are released"
	if pause {
		use, short = "pause NAME", "Pause a workflow: its unfinished runs are paused, new ones created paused"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			body := client.ControlBody{}
			if reason != "" {
				body.Reason = &reason
			}
			var w *client.Workflow
			var status int
			if pause {
				resp, err := cl.PauseWorkflowWithResponse(cmd.Context(), args[0], body)
				if err != nil {
					return fmt.Errorf("pause workflow %s: %w", args[0], err)
				}
				w, status = resp.JSON200, resp.StatusCode()
			} else {
				resp, err := cl.ResumeWorkflowWithResponse(cmd.Context(), args[0], body)
				if err != nil {
					return fmt.Errorf("resume workflow %s: %w", args[0], err)
				}
				w, status = resp.JSON200, resp.StatusCode()
			}
			if w == nil {
				return unexpected(use[:strings.IndexByte(use, ' ')]+" workflow", status)
			}
			if w.Paused {
				by := ""
				if w.PausedBy != nil {
					by = " by " + *w.PausedBy
				}
				fmt.Fprintf(c.stdout, "workflow %s paused%s\n", w.Name, by)
			} else {
				fmt.Fprintf(c.stdout, "workflow %s resumed\n", w.Name)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the events of the runs it pauses or releases")
	return cmd
}

func newVersionsCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	return listGroup{
		use: "versions", alias: "version", short: "Inspect a workflow's versions",
		listUse: "list NAME", listShort: "List the versions of a workflow, newest first", args: cobra.ExactArgs(1),
		list: func(c *cli, ctx context.Context, args []string, limit int, out outputFormat) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			pages := cl.VersionPages(ctx, args[0], &client.ListVersionsParams{Limit: pageSize(limit)})
			return printList(c, pages, limit, out, func(r *client.ListVersionsResponse) ([]client.Version, []byte) {
				return deref(r.JSON200.Items), r.Body
			}, "VERSION\tDIGEST\tSIZE\tCREATED", func(v client.Version) string {
				return fmt.Sprintf("%d\t%s\t%s\t%s", v.Version, v.Digest, formatBytes(v.Size), formatTime(v.CreatedAt))
			})
		},
	}.command(e, stdout, stderr)
}

// listGroup is a noun command (workflows, versions) whose subcommand lists, with
// --limit and --output.
type listGroup struct {
	use, alias, short  string
	listUse, listShort string
	args               cobra.PositionalArgs
	list               func(c *cli, ctx context.Context, args []string, limit int, out outputFormat) error
	// more are the group's other subcommands, sharing its --server and --token.
	more []func(c *cli) *cobra.Command
	// admin: the group's operations need the admin role, so the token from the
	// credentials file is its CAIRN_ADMIN_TOKEN.
	admin bool
}

func (g listGroup) command(e env, stdout, stderr io.Writer) *cobra.Command {
	c := newCLI(e, stdout, stderr)
	c.admin = g.admin
	cmd := &cobra.Command{Use: g.use, Aliases: []string{g.alias}, Short: g.short}
	c.registerFlags(cmd)
	var limit int
	var out outputFormat
	list := &cobra.Command{
		Use:   g.listUse,
		Short: g.listShort,
		Args:  g.args,
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.list(c, cmd.Context(), args, limit, out)
		},
	}
	list.Flags().IntVar(&limit, "limit", 0, "show at most this many (0: all)")
	out.register(list)
	cmd.AddCommand(list)
	for _, sub := range g.more {
		cmd.AddCommand(sub(c))
	}
	return cmd
}

// printList prints the first limit items of pages (0: all) as a table (header, then
// a row each) or, with --output json, as the API's raw items.
func printList[R, T any](c *cli, pages iter.Seq2[*R, error], limit int, out outputFormat,
	itemsOf func(*R) ([]T, []byte), header string, row func(T) string) error {
	items, raw, err := firstItems(pages, limit, itemsOf)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(c.stdout, rawItems{Items: raw})
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, header)
	for _, it := range items {
		fmt.Fprintln(tw, row(it))
	}
	return tw.Flush()
}

// unexpected is the error for a 2xx answer without the body the operation promises.
func unexpected(op string, status int) error {
	return fmt.Errorf("%s: unexpected answer (status %d, no JSON body)", op, status)
}
