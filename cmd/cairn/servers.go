package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// newServersCmd is `cairn servers`: the live dispatchers of the servers' registry,
// each with the binary version it runs, read from the catalog (as migrate does):
// during a rolling upgrade, which servers still run the previous release.
func newServersCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	var dbURL string
	cmd := &cobra.Command{
		Use:   "servers",
		Short: "List the live servers' dispatchers and the binary version each runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := openStore(cmd.Context(), dbURL, newLogger(e, stderr), 0, false)
			if err != nil {
				return err
			}
			defer store.Close()
			list, err := store.DispatcherList(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "DISPATCHER\tVERSION\tTAGS\tSTARTED\tLAST BEAT")
			count := map[string]int{}
			for _, d := range list {
				version := "unknown (an older release)"
				if d.Version != nil {
					version = *d.Version
				}
				count[version]++
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s ago\n", d.ID, version, strings.Join(d.Tags, ","),
					d.StartedAt.UTC().Format(time.RFC3339), time.Since(d.HeartbeatAt).Round(time.Second))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			versions := make([]string, 0, len(count))
			for v, n := range count {
				versions = append(versions, fmt.Sprintf("%s ×%d", v, n))
			}
			sort.Strings(versions)
			fmt.Fprintf(stdout, "%d live, versions: %s\n", len(list), strings.Join(versions, ", "))
			return nil
		},
	}
	cmd.Flags().StringVar(&dbURL, "database-url", "", "PostgreSQL URL")
	bindEnv(cmd.Flags(), map[string]string{"database-url": "CAIRN_DATABASE_URL"})
	return cmd
}
