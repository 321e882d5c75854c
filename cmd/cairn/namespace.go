package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

// newNamespaceCmd is `cairn namespace`: create and list namespaces
// (docs/security.md, "Namespaces"), and their quotas (namespace_quota.go).
func newNamespaceCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	return listGroup{
		use: "namespace", alias: "namespaces", short: "Create and list namespaces (each has its own workflows, runs, secrets, limits and events) and set their quotas",
		listUse: "list", listShort: "List the namespaces (a scoped token sees its own)", args: cobra.NoArgs,
		admin: true,
		list: func(c *cli, ctx context.Context, _ []string, limit int, out outputFormat) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			p := &client.ListNamespacesParams{Limit: pageSize(limit)}
			return printList(c, cl.NamespacePages(ctx, p), limit, out, func(r *client.ListNamespacesResponse) ([]client.APINamespace, []byte) {
				return deref(r.JSON200.Items), r.Body
			}, "NAME\tCREATED\tBY", func(n client.APINamespace) string {
				return fmt.Sprintf("%s\t%s\t%s", n.Name, formatTime(n.CreatedAt), n.CreatedBy)
			})
		},
		more: []func(c *cli) *cobra.Command{newNamespaceCreateCmd, newNamespaceSetQuotaCmd, newNamespaceGetQuotaCmd},
	}.command(e, stdout, stderr)
}

// newNamespaceCreateCmd is `cairn namespace create NAME`.
func newNamespaceCreateCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "create NAME",
		Short: "Create a namespace (admin of every namespace)",
		Long: `create makes namespace NAME: 1 to 31 lower-case letters, digits and '-'.
Act in it with --namespace NAME (or CAIRN_NAMESPACE), or with a token scoped to it
(cairn token create --scope NAME).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			resp, err := cl.CreateNamespaceWithResponse(cmd.Context(), client.CreateNamespaceBody{Name: args[0]})
			if err != nil {
				return fmt.Errorf("create namespace %s: %w", args[0], err)
			}
			if resp.JSON201 == nil {
				return unexpected("create namespace", resp.StatusCode())
			}
			_, err = fmt.Fprintf(c.stdout, "namespace %s created\n", resp.JSON201.Name)
			return err
		},
	}
}
