package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

func newWorkflowsCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	c := newCLI(e, stdout, stderr)
	cmd := &cobra.Command{
		Use:     "workflows",
		Aliases: []string{"workflow"},
		Short:   "Inspect workflows",
	}
	c.registerFlags(cmd)
	var limit int
	var out outputFormat
	list := &cobra.Command{
		Use:   "list",
		Short: "List workflows by name",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.listWorkflows(cmd.Context(), limit, out)
		},
	}
	list.Flags().IntVar(&limit, "limit", 0, "show at most this many (0: all)")
	out.register(list)
	cmd.AddCommand(list)
	return cmd
}

func (c *cli) listWorkflows(ctx context.Context, limit int, out outputFormat) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	pages := cl.WorkflowPages(ctx, &client.ListWorkflowsParams{Limit: pageSize(limit)})
	items, raw, err := firstItems(pages, limit, func(r *client.ListWorkflowsResponse) ([]client.Workflow, []byte) {
		return deref(r.JSON200.Items), r.Body
	})
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(c.stdout, rawItems{Items: raw})
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "NAME\tLATEST\tUPDATED\tDESCRIPTION")
	for _, w := range items {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", w.Name, w.LatestVersion, formatTime(w.UpdatedAt), shorten(w.Description, 72))
	}
	return tw.Flush()
}

func newVersionsCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	c := newCLI(e, stdout, stderr)
	cmd := &cobra.Command{
		Use:     "versions",
		Aliases: []string{"version"},
		Short:   "Inspect a workflow's versions",
	}
	c.registerFlags(cmd)
	var limit int
	var out outputFormat
	list := &cobra.Command{
		Use:   "list NAME",
		Short: "List the versions of a workflow, newest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.listVersions(cmd.Context(), args[0], limit, out)
		},
	}
	list.Flags().IntVar(&limit, "limit", 0, "show at most this many (0: all)")
	out.register(list)
	cmd.AddCommand(list)
	return cmd
}

func (c *cli) listVersions(ctx context.Context, name string, limit int, out outputFormat) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	pages := cl.VersionPages(ctx, name, &client.ListVersionsParams{Limit: pageSize(limit)})
	items, raw, err := firstItems(pages, limit, func(r *client.ListVersionsResponse) ([]client.Version, []byte) {
		return deref(r.JSON200.Items), r.Body
	})
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(c.stdout, rawItems{Items: raw})
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "VERSION\tDIGEST\tSIZE\tCREATED")
	for _, v := range items {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", v.Version, v.Digest, formatBytes(v.Size), formatTime(v.CreatedAt))
	}
	return tw.Flush()
}

// unexpected is the error for a 2xx answer without the body the operation promises.
func unexpected(op string, status int) error {
	return fmt.Errorf("%s: unexpected answer (status %d, no JSON body)", op, status)
}
