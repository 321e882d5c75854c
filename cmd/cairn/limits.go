package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

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
				fmt.Fprintf(tw, "# %s set to %s by %s at %s\n", o.Name, overrideText(o.Concurrency, o.RateLimit), o.UpdatedBy, formatTime(o.UpdatedAt))
			}
			return tw.Flush()
		},
		more: []func(c *cli) *cobra.Command{newLimitSetCmd, newLimitClearCmd},
	}.command(e, stdout, stderr)
}

// overrideText is a limit set at run time, as cairn limit prints it.
func overrideText(conc *int64, rate *client.RateSpec) string {
	var parts []string
	if conc != nil {
		parts = append(parts, fmt.Sprintf("%d per key", *conc))
	}
	if rate != nil {
		parts = append(parts, fmt.Sprintf("%d per %s", rate.Limit, rate.Per))
	}
	return strings.Join(parts, ", ")
}

// newLimitSetCmd is `cairn limit set NAME [N] [--rate N --per D]`.
func newLimitSetCmd(c *cli) *cobra.Command {
	var rate int
	var per string
	cmd := &cobra.Command{
		Use:   "set NAME [N] [--rate N --per DURATION]",
		Short: "Change a concurrency limit's slots per key, or a rate limit's tokens per window (admin)",
		Long: `set makes N the slots per key of the concurrency limit NAME, for every step whose
concurrency names it, and/or (--rate, --per) the rate limit NAME N starts per window,
for every step whose rate_limit names it, from the next claim on; running steps keep
running. What is not given keeps its value. The change is kept in the catalog: it
outlives restarts and deploys and wins over the manifests until cairn limit clear.
Needs an admin token: --token, CAIRN_TOKEN, or CAIRN_ADMIN_TOKEN of the credentials
file cairn dev writes.`,
		Example: `  cairn limit set tenant 3
  cairn limit set stripe --rate 100 --per 1m`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var body client.PutLimitBody
			if len(args) == 2 {
				n, err := strconv.Atoi(args[1])
				if err != nil || n < 1 {
					return fmt.Errorf("set limit %s: %q is not a positive number", args[0], args[1])
				}
				n64 := int64(n)
				body.Concurrency = &n64
			}
			if (rate == 0) != (per == "") {
				return fmt.Errorf("set limit %s: --rate and --per go together", args[0])
			}
			if rate != 0 {
				if rate < 1 {
					return fmt.Errorf("set limit %s: --rate %d is not a positive number", args[0], rate)
				}
				body.RateLimit = &client.RateSpec{Limit: int64(rate), Per: per}
			}
			if body.Concurrency == nil && body.RateLimit == nil {
				return fmt.Errorf("set limit %s: give N (slots per key), --rate and --per, or both", args[0])
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			resp, err := cl.PutLimitWithResponse(cmd.Context(), args[0], body)
			if err != nil {
				return fmt.Errorf("set limit %s: %w", args[0], err)
			}
			if resp.JSON200 == nil {
				return unexpected("set limit", resp.StatusCode())
			}
			_, err = fmt.Fprintf(c.stdout, "limit %s: %s\n", resp.JSON200.Name, overrideText(resp.JSON200.Concurrency, resp.JSON200.RateLimit))
			return err
		},
	}
	cmd.Flags().IntVar(&rate, "rate", 0, "the rate limit's tokens (starts) per window; with --per")
	cmd.Flags().StringVar(&per, "per", "", "the rate limit's window, a Go duration from 1ms to 24h (1s, 1m); with --rate")
	return cmd
}

// newLimitClearCmd is `cairn limit clear NAME`.
func newLimitClearCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "clear NAME",
		Short: "Remove the limits set at run time: the manifests' apply again (admin)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			resp, err := cl.ClearLimitWithResponse(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("clear limit %s: %w", args[0], err)
			}
			if resp.StatusCode() != http.StatusNoContent {
				return unexpected("clear limit", resp.StatusCode())
			}
			_, err = fmt.Fprintf(c.stdout, "limit %s: the manifests' limits apply\n", args[0])
			return err
		},
	}
}
