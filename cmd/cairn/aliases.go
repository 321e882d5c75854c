package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

func newPromoteCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	c := newCLI(e, stdout, stderr)
	var alias string
	cmd := &cobra.Command{
		Use:   "promote WORKFLOW VERSION",
		Short: "Point an alias of a workflow (latest unless --alias) at a version",
		Long: `promote points an alias at a version of WORKFLOW: latest (what runs started
without a version get), or the one --alias names (created if need be). Runs
already created keep their version. The change is recorded with your token's name;
cairn rollback undoes it.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := strconv.ParseInt(args[1], 10, 32)
			if err != nil || v < 1 {
				return fmt.Errorf("promote: VERSION %q is not a version number", args[1])
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			resp, err := cl.SetAliasWithResponse(cmd.Context(), args[0], alias, client.SetAliasBody{Version: v})
			if err != nil {
				return fmt.Errorf("promote %s to version %d: %w", alias, v, err)
			}
			if resp.JSON200 == nil {
				return unexpected("promote", resp.StatusCode())
			}
			return c.printAliasChange(resp.JSON200)
		},
	}
	c.registerFlags(cmd)
	cmd.Flags().StringVar(&alias, "alias", "latest", "the alias to point at VERSION")
	return cmd
}

func newRollbackCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	c := newCLI(e, stdout, stderr)
	var alias string
	cmd := &cobra.Command{
		Use:   "rollback WORKFLOW",
		Short: "Move an alias of a workflow (latest unless --alias) back to its previous version",
		Long: `rollback moves latest (or the alias --alias names) back to the version it named
before its current one. New runs start there; runs already created keep their
version. Rolling back again goes further back through the alias's history. The
change is recorded with your token's name.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			resp, err := cl.RollbackAliasWithResponse(cmd.Context(), args[0], alias)
			if err != nil {
				return fmt.Errorf("roll back %s: %w", alias, err)
			}
			if resp.JSON200 == nil {
				return unexpected("rollback", resp.StatusCode())
			}
			return c.printAliasChange(resp.JSON200)
		},
	}
	c.registerFlags(cmd)
	cmd.Flags().StringVar(&alias, "alias", "latest", "the alias to roll back")
	return cmd
}

// printAliasChange says where an alias points after a change, and from where.
func (c *cli) printAliasChange(a *client.Alias) error {
	from := ""
	if a.History != nil && len(*a.History) > 0 {
		if h := (*a.History)[0]; h.Version == int64(a.Version) && h.PreviousVersion != nil {
			from = fmt.Sprintf(" (was %d)", *h.PreviousVersion)
		}
	}
	_, err := fmt.Fprintf(c.stdout, "%s %s -> version %d%s\n", a.Workflow, a.Alias, a.Version, from)
	return err
}

// aliasesCmd is `cairn workflows aliases NAME`: the aliases of a workflow.
func aliasesCmd(c *cli) *cobra.Command {
	var limit int
	var out outputFormat
	cmd := &cobra.Command{
		Use:   "aliases NAME",
		Short: "List the aliases of a workflow and the versions they name",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			pages := cl.AliasPages(cmd.Context(), args[0], &client.ListAliasesParams{Limit: pageSize(limit)})
			return printList(c, pages, limit, out, func(r *client.ListAliasesResponse) ([]client.Alias, []byte) {
				return deref(r.JSON200.Items), r.Body
			}, "ALIAS\tVERSION\tUPDATED\tBY", func(a client.Alias) string {
				return fmt.Sprintf("%s\t%d\t%s\t%s", a.Alias, a.Version, formatTime(a.UpdatedAt), a.UpdatedBy)
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "show at most this many (0: all)")
	out.register(cmd)
	return cmd
}

// startVersion fills the version or the alias of a start-run body from --version:
// a number is a version, anything else an alias ("" and 0: latest).
func startVersion(body *client.StartRunBody, version string) error {
	var err error
	body.Version, body.Alias, err = versionFlag(version)
	return err
}

// versionFlag reads a --version flag that takes a version number or an alias: at
// most one of the two back, neither when the flag is empty or 0.
func versionFlag(version string) (*int64, *string, error) {
	if version == "" || version == "0" {
		return nil, nil, nil
	}
	if n, err := strconv.ParseInt(version, 10, 32); err == nil {
		if n < 0 {
			return nil, nil, fmt.Errorf("--version %s: want a version number or an alias", version)
		}
		return &n, nil, nil
	}
	return nil, &version, nil
}
