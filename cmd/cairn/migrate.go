package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/migrations"
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
	var phase string
	up := &cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration, or those of one phase of a rolling upgrade (--phase)",
		Long: `Applies the pending migrations in order. With --phase expand, only those up to the
first contract migration: the servers of the previous release run on the schema it
leaves, beside the new ones. With --phase contract (or no --phase), all of them: run it
once no server of the previous release is left (cairn servers lists their versions).
cairn migrate plan shows each pending migration's phase and locks.`,
		Args: cobra.NoArgs,
		RunE: withStore(func(cmd *cobra.Command, store *catalog.Store) error {
			var p migrations.Phase
			switch phase {
			case "", string(migrations.PhaseContract):
				p = migrations.PhaseContract
			case string(migrations.PhaseExpand):
				p = migrations.PhaseExpand
			default:
				return fmt.Errorf("--phase %q: want expand or contract", phase)
			}
			applied, err := store.MigratePhase(cmd.Context(), newLogger(e, stderr), p)
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
	up.Flags().StringVar(&phase, "phase", "", "expand: the pending migrations up to the first contract one; contract: all (the default)")
	plan := &cobra.Command{
		Use:   "plan",
		Short: "List the pending migrations: each one's phase, the locks it takes, and whether it runs online",
		Args:  cobra.NoArgs,
		RunE: withStore(func(cmd *cobra.Command, store *catalog.Store) error {
			pending, err := store.MigrationPlan(cmd.Context())
			if err != nil {
				return err
			}
			if len(pending) == 0 {
				fmt.Fprintln(stdout, "schema is up to date: nothing pending")
				return nil
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tNAME\tPHASE\tONLINE\tLOCKS")
			expand := true
			for _, m := range pending {
				online := "no"
				if m.Online {
					online = "yes"
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", m.Version, m.Name, m.Phase, online, m.Locks)
				expand = expand && m.Phase == migrations.PhaseExpand
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if expand {
				fmt.Fprintln(stdout, "all expand: `cairn migrate up --phase expand` applies them while the previous release runs")
			}
			return nil
		}),
	}
	cmd.AddCommand(up, plan, status)
	return cmd
}
