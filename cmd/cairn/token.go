package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/client"
)

// newTokenCmd is `cairn token`: create, list and revoke managed API tokens
// (docs/security.md, "Managed tokens").
func newTokenCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	var revoked bool
	cmd := listGroup{
		use: "token", alias: "tokens", short: "Create, list and revoke API tokens (admin): values shown once, stored hashed",
		listUse: "list", listShort: "List the managed tokens, newest first: never a value (--revoked: the revoked ones too)", args: cobra.NoArgs,
		admin: true,
		list: func(c *cli, ctx context.Context, _ []string, limit int, out outputFormat) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			p := &client.ListTokensParams{Limit: pageSize(limit)}
			if revoked {
				p.Revoked = &revoked
			}
			return printList(c, cl.TokenPages(ctx, p), limit, out, func(r *client.ListTokensResponse) ([]client.APIToken, []byte) {
				return deref(r.JSON200.Items), r.Body
			}, "ID\tNAME\tROLE\tNAMESPACE\tCREATED\tBY\tEXPIRES\tLAST USED\tREVOKED", func(t client.APIToken) string {
				ns := "*"
				if t.Namespace != nil {
					ns = *t.Namespace
				}
				return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", t.Id, t.Name, t.Role, ns, formatTime(t.CreatedAt), t.CreatedBy,
					timeOr(t.ExpiresAt, "never"), timeOr(t.LastUsedAt, "never"), timeOr(t.RevokedAt, "-"))
			})
		},
		more: []func(c *cli) *cobra.Command{newTokenCreateCmd, newTokenRevokeCmd},
	}.command(e, stdout, stderr)
	for _, sub := range cmd.Commands() {
		if sub.Name() == "list" {
			sub.Flags().BoolVar(&revoked, "revoked", false, "list revoked tokens too")
		}
	}
	return cmd
}

// scopeOf says which namespace a token acts in, for a line about it.
func scopeOf(ns *string) string {
	if ns == nil {
		return ", every namespace"
	}
	return ", namespace " + *ns
}

// timeOr formats *t, or none for nil.
func timeOr(t *time.Time, none string) string {
	if t == nil {
		return none
	}
	return formatTime(*t)
}

// newTokenCreateCmd is `cairn token create NAME --role ROLE [--expires-in 30d]`.
func newTokenCreateCmd(c *cli) *cobra.Command {
	var role, expiresIn, expiresAt, scope string
	cmd := &cobra.Command{
		Use:   "create NAME --role viewer|operator|admin [--scope NAMESPACE] [--expires-in 30d | --expires-at TIME]",
		Short: "Create a token; its value is printed this once",
		Long: `create makes a managed API token named NAME (the actor its requests are
recorded under) with a role, and prints its value on stdout, alone on a line: the
server keeps only its SHA-256, so store the value now. The token works on every
server at once, until it expires (--expires-in, --expires-at) or is revoked
(cairn token revoke). With --scope it acts in that namespace only (cairn
namespace create); without, in every namespace. Needs an admin token.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := client.CreateTokenBody{Name: args[0], Role: client.CreateTokenBodyRole(strings.ToLower(role))}
			if scope != "" {
				body.Namespace = &scope
			}
			switch {
			case expiresIn != "" && expiresAt != "":
				return fmt.Errorf("create token: give --expires-in or --expires-at, not both")
			case expiresIn != "":
				p, err := bundle.ParseRetentionPeriod(strings.TrimSpace(expiresIn))
				if err != nil || p.Forever {
					return fmt.Errorf("--expires-in %q: give a period such as 12h, 30d or 1y", expiresIn)
				}
				t := time.Now().Add(p.D)
				body.ExpiresAt = &t
			case expiresAt != "":
				t, err := time.Parse(time.RFC3339, expiresAt)
				if err != nil {
					return fmt.Errorf("--expires-at %q: give an RFC 3339 time (2027-01-01T00:00:00Z)", expiresAt)
				}
				body.ExpiresAt = &t
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			resp, err := cl.CreateTokenWithResponse(cmd.Context(), body)
			if err != nil {
				return fmt.Errorf("create token %s: %w", args[0], err)
			}
			if resp.JSON201 == nil {
				return unexpected("create token", resp.StatusCode())
			}
			t := resp.JSON201
			fmt.Fprintf(c.stderr, "token %s (%s%s, id %s, expires %s): its value, shown this once:\n", t.Name, t.Role, scopeOf(t.Namespace), t.Id, timeOr(t.ExpiresAt, "never"))
			_, err = fmt.Fprintln(c.stdout, t.Value)
			return err
		},
	}
	cmd.Flags().StringVar(&role, "role", "", "viewer, operator or admin")
	cmd.Flags().StringVar(&expiresIn, "expires-in", "", "the token expires after this period (12h, 30d, 1y); default never")
	cmd.Flags().StringVar(&expiresAt, "expires-at", "", "the token expires at this time (RFC 3339)")
	cmd.Flags().StringVar(&scope, "scope", "", "the one namespace the token acts in; default every namespace")
	_ = cmd.MarkFlagRequired("role")
	return cmd
}

// newTokenRevokeCmd is `cairn token revoke ID`.
func newTokenRevokeCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a token: every server refuses it within a second",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			resp, err := cl.RevokeTokenWithResponse(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("revoke token %s: %w", args[0], err)
			}
			if resp.JSON200 == nil {
				return unexpected("revoke token", resp.StatusCode())
			}
			_, err = fmt.Fprintf(c.stdout, "token %s (%s) revoked at %s\n", resp.JSON200.Name, resp.JSON200.Id, timeOr(resp.JSON200.RevokedAt, "-"))
			return err
		},
	}
}
