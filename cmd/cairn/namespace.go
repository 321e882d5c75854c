package main

import (
	"io"

	"github.com/spf13/cobra"
)

// newNamespaceCmd is `cairn namespace …`: the quotas of a namespace
// (namespace_quota.go).
func newNamespaceCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	c := newCLI(e, stdout, stderr)
	c.admin = true
	cmd := &cobra.Command{Use: "namespace", Aliases: []string{"namespaces"}, Short: "Manage namespaces and their quotas (admin)"}
	c.registerFlags(cmd)
	cmd.AddCommand(newNamespaceQuotaCmds(c)...)
	return cmd
}
