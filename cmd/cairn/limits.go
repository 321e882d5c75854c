package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

// newLimitCmd is `cairn limit list [NAME]` and `cairn limit set NAME N`.
func newLimitCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	return listGroup{
		use: "limit", alias: "limits", short: "Show concurrency limits in use and change them at run time",
		listUse: "list [NAME]", listShort: "Show the slots in use and the steps waiting per key of each concurrency limit",
		args: cobra.MaximumNArgs(1),
		// set needs an admin token; list a viewer's is enough, and an admin's does.
		admin: true,
		list: func(c *cli, ctx context.Context, args []string, limit int, out outputFormat) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			p := &client.ListLimitsParams{}
			if len(args) == 1 {
				p.Name = &args[0]
			}
			resp, err := cl.ListLimitsWithResponse(ctx, p)
			if err != nil {
				return fmt.Errorf("list limits: %w", err)
			}
			if resp.JSON200 == nil {
				return unexpected("list limits", resp.StatusCode())
			}
			if out.json() {
				_, err := c.stdout.Write(resp.Body)
				return err
			}
			tw := newTable(c.stdout)
			fmt.Fprintln(tw, "NAME\tKEY\tRUNNING\tREADY\tLIMIT")
			keys := deref(resp.JSON200.Keys)
			if limit > 0 && len(keys) > limit {
				keys = keys[:limit]
			}
			for _, k := range keys {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", k.Name, k.Key, k.Running, k.Ready, k.Limit)
			}
			for _, r := range deref(resp.JSON200.Rates) {
				fmt.Fprintf(tw, "%s\t%s\t-\t%d\t%d per %s (%.1f left)\n", r.Name, r.Key, r.Ready, r.Limit, r.Per, r.Tokens)
			}
			for _, o := range deref(resp.JSON200.Overrides) {
				fmt.Fprintf(tw, "# %s set to %d by %s at %s\n", o.Name, o.Concurrency, o.UpdatedBy, formatTime(o.UpdatedAt))
			}
			return tw.Flush()
		},
		more: []func(c *cli) *cobra.Command{newLimitSetCmd},
	}.command(e, stdout, stderr)
}

// newLimitSetCmd is `cairn limit set NAME N`.
func newLimitSetCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "set NAME N",
		Short: "Change the slots per key of a concurrency limit (admin)",
		Long: `set makes N the slots per key of the concurrency limit NAME, for every step whose
concurrency names it, from the next claim on; running steps keep running. Needs an
admin token: --token, CAIRN_TOKEN, or CAIRN_ADMIN_TOKEN of the credentials file
cairn dev writes.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 {
				return fmt.Errorf("set limit %s: %q is not a positive number", args[0], args[1])
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			resp, err := cl.PutLimitWithResponse(cmd.Context(), args[0], client.PutLimitBody{Concurrency: int64(n)})
			if err != nil {
				return fmt.Errorf("set limit %s: %w", args[0], err)
			}
			if resp.JSON200 == nil {
				return unexpected("set limit", resp.StatusCode())
			}
			_, err = fmt.Fprintf(c.stdout, "limit %s: %d per key\n", resp.JSON200.Name, resp.JSON200.Concurrency)
			return err
		},
	}
}
