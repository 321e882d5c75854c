package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

// maxSecretValue mirrors the server's bound on a secret's value (64 KiB).
const maxSecretValue = 64 << 10

func newSecretCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	return listGroup{
		use: "secret", alias: "secrets", short: "Set and list secrets (admin): write-only values, encrypted at rest",
		listUse: "list", listShort: "List secrets by name with their newest version: never a value", args: cobra.NoArgs,
		admin: true,
		list: func(c *cli, ctx context.Context, _ []string, limit int, out outputFormat) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			pages := cl.SecretPages(ctx, &client.ListSecretsParams{Limit: pageSize(limit)})
			return printList(c, pages, limit, out, func(r *client.ListSecretsResponse) ([]client.Secret, []byte) {
				return deref(r.JSON200.Items), r.Body
			}, "NAME\tVERSION\tSET\tSET BY", func(s client.Secret) string {
				return fmt.Sprintf("%s\t%d\t%s\t%s", s.Name, s.Version, formatTime(s.CreatedAt), s.CreatedBy)
			})
		},
		more: []func(c *cli) *cobra.Command{newSecretSetCmd},
	}.command(e, stdout, stderr)
}

// newSecretSetCmd is `cairn secret set NAME [--from-file F]`.
func newSecretSetCmd(c *cli) *cobra.Command {
	var fromFile string
	cmd := &cobra.Command{
		Use:   "set NAME",
		Short: "Set a secret's value (a new version) from stdin or --from-file",
		Long: `set stores a new version of the secret NAME (the first creates it), encrypted at
rest with the server's key; the newest version is the one in use. The value is read
from --from-file as it is, or from stdin (one trailing newline dropped, so that
echo works), never from the command line. Needs an admin token: --token,
CAIRN_TOKEN, or CAIRN_ADMIN_TOKEN of the credentials file cairn dev writes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			value, err := readSecretValue(cmd.InOrStdin(), fromFile)
			if err != nil {
				return err
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			resp, err := cl.PutSecretWithResponse(cmd.Context(), args[0], client.PutSecretBody{Value: value})
			if err != nil {
				return fmt.Errorf("set secret %s: %w", args[0], err)
			}
			if resp.JSON200 == nil {
				return unexpected("set secret", resp.StatusCode())
			}
			_, err = fmt.Fprintf(c.stdout, "secret %s: version %d\n", resp.JSON200.Name, resp.JSON200.Version)
			return err
		},
	}
	cmd.Flags().StringVar(&fromFile, "from-file", "", "read the value from this file, byte for byte")
	return cmd
}

// readSecretValue reads a value from file, or from stdin without its one trailing
// newline.
func readSecretValue(stdin io.Reader, file string) (string, error) {
	var b []byte
	var err error
	if file != "" {
		b, err = os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("read secret value: %w", err)
		}
	} else {
		b, err = io.ReadAll(io.LimitReader(stdin, maxSecretValue+3))
		if err != nil {
			return "", fmt.Errorf("read secret value from stdin: %w", err)
		}
		s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		b = []byte(s)
	}
	switch {
	case len(b) == 0:
		return "", errors.New("set secret: the value is empty (give it on stdin or with --from-file)")
	case len(b) > maxSecretValue:
		return "", fmt.Errorf("set secret: the value is over %d bytes", maxSecretValue)
	}
	return string(b), nil
}
