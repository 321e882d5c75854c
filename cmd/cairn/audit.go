package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

// newAuditCmd is `cairn audit`: list and export the audit log (docs/security.md,
// "Audit log").
func newAuditCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	var since, actor, action string
	cmd := listGroup{
		use: "audit", alias: "audit-log", short: "List and export the audit log (admin): who did what through the API",
		listUse: "list", listShort: "List audit records, newest first (--since, --actor, --action)", args: cobra.NoArgs,
		admin: true,
		list: func(c *cli, ctx context.Context, _ []string, limit int, out outputFormat) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			p := &client.ListAuditParams{Limit: pageSize(limit)}
			if actor != "" {
				p.Actor = &actor
			}
			if action != "" {
				p.Action = &action
			}
			if since != "" {
				t, err := sinceTime(since)
				if err != nil {
					return err
				}
				p.Since = &t
			}
			return printList(c, cl.AuditPages(ctx, p), limit, out, func(r *client.ListAuditResponse) ([]client.AuditRecord, []byte) {
				return deref(r.JSON200.Items), r.Body
			}, "TIME\tACTOR\tROLE\tACTION\tTARGET\tOUTCOME\tREQUEST", func(r client.AuditRecord) string {
				outcome := string(r.Outcome)
				if code := deref(r.Code); code != "" {
					outcome += " (" + code + ")"
				}
				return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", formatTime(r.At), r.Actor, r.Role, r.Action, r.Target, outcome, r.RequestId)
			})
		},
		more: []func(c *cli) *cobra.Command{newAuditExportCmd},
	}.command(e, stdout, stderr)
	for _, sub := range cmd.Commands() {
		if sub.Name() == "list" {
			sub.Flags().StringVar(&since, "since", "", "only records since: a time (RFC 3339) or a duration ago (24h)")
			sub.Flags().StringVar(&actor, "actor", "", "only this actor's records (a token's name)")
			sub.Flags().StringVar(&action, "action", "", "only this action's records (an operation ID: cancelRun, createToken…; or uiLogin)")
		}
	}
	return cmd
}

// newAuditExportCmd is `cairn audit export [--since] [--until]`.
func newAuditExportCmd(c *cli) *cobra.Command {
	var since, until string
	cmd := &cobra.Command{
		Use:   "export [--since TIME|DURATION] [--until TIME]",
		Short: "Export audit records to the blob store as JSON Lines, and print the key",
		Long: `export has the server write the audit records of a time range (default: all)
to the blob store as JSON Lines, one record a line, oldest first, and prints the
object's key, how many records it holds, and a URL that reads it for an hour where
the blob store has presigned URLs. Exports are never collected: make one before the
audit retention (CAIRN_AUDIT_RETENTION) deletes what you must keep.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var body client.ExportAuditBody
			if since != "" {
				t, err := sinceTime(since)
				if err != nil {
					return err
				}
				body.Since = &t
			}
			if until != "" {
				t, err := time.Parse(time.RFC3339, until)
				if err != nil {
					return fmt.Errorf("--until %q: give an RFC 3339 time (2026-12-01T00:00:00Z)", until)
				}
				body.Until = &t
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			resp, err := cl.ExportAuditWithResponse(cmd.Context(), body)
			if err != nil {
				return fmt.Errorf("export the audit log: %w", err)
			}
			if resp.JSON200 == nil {
				return unexpected("export the audit log", resp.StatusCode())
			}
			x := resp.JSON200
			fmt.Fprintf(c.stdout, "%s\t%d records\t%d bytes\n", x.Key, x.Records, x.Size)
			if u := deref(x.Url); u != "" {
				fmt.Fprintln(c.stdout, u)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "records since: a time (RFC 3339) or a duration ago (720h)")
	cmd.Flags().StringVar(&until, "until", "", "records before this time (RFC 3339)")
	return cmd
}
