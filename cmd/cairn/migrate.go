package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/cairnrun/cairn/catalog"
	"github.com/spf13/cobra"
)

func newMigrateCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	var dbURL string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply or inspect the catalog's schema migrations",
	}
	cmd.PersistentFlags().StringVar(&dbURL, "database-url", "", "PostgreSQL URL")
	bindEnv(cmd.PersistentFlags(), map[string]string{"database-url": "CAIRN_DATABASE_URL"})

	// withStore opens the catalog at --database-url for one subcommand.
	withStore := func(run func(*cobra.Command, *catalog.Store) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			store, err := openStore(cmd.Context(), dbURL, newLogger(e, stderr), 0, false)
			if err != nil {
				return err
			}
			defer store.Close()
			return run(cmd, store)
		}
	}
	up := &cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration",
		Args:  cobra.NoArgs,
		RunE: withStore(func(cmd *cobra.Command, store *catalog.Store) error {
			applied, err := store.Migrate(cmd.Context(), newLogger(e, stderr))
			if err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Fprintln(stdout, "schema is up to date")
				return nil
			}
			fmt.Fprintf(stdout, "applied migrations %v\n", applied)
			return nil
		}),
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "List the migrations and whether each is applied",
		Args:  cobra.NoArgs,
		RunE: withStore(func(cmd *cobra.Command, store *catalog.Store) error {
			states, err := store.MigrationStatus(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tNAME\tSTATE\tAPPLIED AT")
			for _, st := range states {
				state, name, at := "pending", st.Name, ""
				switch {
				case st.Unknown:
					state, name = "unknown to this binary", "?"
				case st.Applied:
					state = "applied"
				}
				if st.AppliedAt != nil {
					at = st.AppliedAt.Format("2006-01-02T15:04:05Z")
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", st.Version, name, state, at)
			}
			return tw.Flush()
		}),
	}
	cmd.AddCommand(up, status)
	return cmd
}
