package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// env reads the process environment; tests pass their own.
type env func(string) string

// or returns the variable's value, or def when it is unset or empty.
func (e env) or(key, def string) string {
	if v := e(key); v != "" {
		return v
	}
	return def
}

// exitError carries a specific exit code (for example `run start --wait` of a run
// that failed).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// run executes the command line args with the given environment and streams.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	root := newRootCmd(env(getenv), stdout, stderr)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root.ExecuteContext(ctx)
}

func newRootCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "cairn",
		Short:         "Cairn: durable functions on PostgreSQL and object storage",
		SilenceUsage:  true,
		SilenceErrors: true,
		// Before any command runs: the environment's settings, each parsed as its
		// flag would be (a flag given on the command line wins). A variable that
		// does not parse stops the command before it starts anything.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			_, levelErr := parseLogLevel(e("CAIRN_LOG_LEVEL"))
			return errors.Join(levelErr, applyEnv(cmd.Flags(), e))
		},
	}
	root.AddCommand(
		newDevCmd(e, stdout, stderr),
		newServeCmd(e, stdout, stderr),
		newMigrateCmd(e, stdout, stderr),
		newGCCmd(e, stdout, stderr),
		newServersCmd(e, stdout, stderr),
		newOpenAPICmd(stdout),
		newTestCmd(e, stdout, stderr),
	)
	root.AddCommand(newClientCmds(e, stdout, stderr)...)
	root.AddCommand(newDevLoopCmds(e, stdout, stderr)...)
	refuseUnknownCommands(root)
	return root
}

// refuseUnknownCommands makes every group of commands (root, run, schedule, …)
// refuse a word that is none of its commands: an error naming it and the commands
// it is close to (exit 1), where cobra would print the group's help and exit 0 below
// the root. A group given no word still prints its help.
func refuseUnknownCommands(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		refuseUnknownCommands(sub)
	}
	if !cmd.HasSubCommands() || cmd.Run != nil || cmd.RunE != nil {
		return
	}
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return unknownCommand(cmd, args[0])
	}
}

// nearCommands returns cmd's commands closest to word: one edit away ("lst":
// list) if any, else two ("delpoy": deploy, cobra's own reach), or starting
// with word.
func nearCommands(cmd *cobra.Command, word string) []string {
	for _, d := range []int{1, 2} {
		cmd.SuggestionsMinimumDistance = d
		if near := cmd.SuggestionsFor(word); len(near) > 0 {
			return near
		}
	}
	return nil
}

// unknownCommand is the error of word, which is none of cmd's commands: `unknown
// command "lst" for "cairn run": did you mean "list"?`.
func unknownCommand(cmd *cobra.Command, word string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "unknown command %q for %q", word, cmd.CommandPath())
	if near := nearCommands(cmd, word); len(near) > 0 {
		for i, n := range near {
			near[i] = strconv.Quote(n)
		}
		fmt.Fprintf(&b, ": did you mean %s?", strings.Join(near, " or "))
	}
	fmt.Fprintf(&b, " (%s --help lists its commands)", cmd.CommandPath())
	return errors.New(b.String())
}

// newLogger builds the process logger: text on stderr, level from CAIRN_LOG_LEVEL
// (debug, info, warn, error; default info; a malformed one stopped the command in
// PersistentPreRunE).
func newLogger(e env, stderr io.Writer) *slog.Logger {
	level, _ := parseLogLevel(e("CAIRN_LOG_LEVEL"))
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
}

// parseLogLevel reads CAIRN_LOG_LEVEL: debug, info, warn or error, any case; empty
// is info.
func parseLogLevel(v string) (slog.Level, error) {
	switch strings.ToLower(v) {
	case "":
		return slog.LevelInfo, nil
	case "debug", "info", "warn", "error":
		var level slog.Level
		err := level.UnmarshalText([]byte(v))
		return level, err
	}
	return slog.LevelInfo, fmt.Errorf("CAIRN_LOG_LEVEL=%q: want debug, info, warn or error", v)
}
