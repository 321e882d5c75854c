package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/bundle"
)

// newDevLoopCmds are the commands of the edit-and-try loop: init, validate (and
// dev --watch, a flag of dev).
func newDevLoopCmds(e env, stdout, stderr io.Writer) []*cobra.Command {
	return []*cobra.Command{newInitCmd(stdout), newValidateCmd(stdout)}
}

func newValidateCmd(stdout io.Writer) *cobra.Command {
	var maxSteps int
	cmd := &cobra.Command{
		Use:   "validate DIR",
		Short: "Check a bundle folder as a deploy would, without a server",
		Long: `validate runs every check a deploy runs on a bundle, here and offline: the
folder packed into the canonical archive, then that archive read back as the
server reads an upload (the entries and sizes, cairn.yaml's schema and rules,
exec programs present and executable, expressions, schedules, secrets' names,
the step limit). It prints the workflow, its steps and the digest the server
would register; every problem is printed, naming the file, step and field, and
the exit status is 1.

One check needs the server: a workflow step pinned to a version number of
another workflow (workflow: {name: billing, version: 3}) must name a version
that exists there. validate lists such pins.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := validateBundle(cmd.Context(), args[0], bundle.Limits{MaxSteps: maxSteps})
			if err != nil {
				return err
			}
			printValid(stdout, args[0], b)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&maxSteps, "max-steps", bundle.DefaultMaxSteps, "most steps a workflow may have: the server's --max-steps")
	bindEnv(f, map[string]string{"max-steps": "CAIRN_MAX_STEPS"})
	return cmd
}

// validateBundle runs on the bundle folder dir the checks of a deploy
// (internal/deploy.Register, but for the pins of child workflows, which need the
// catalog): it packs the folder into its canonical archive, as `cairn deploy`
// does, and loads that archive with bundle.Load under lim, as the server does
// with an upload. A folder that changes while it is read is an error too.
//
// Errors about the bundle match bundle.ErrInvalid and start with dir; each
// problem is on a line of its own.
func validateBundle(ctx context.Context, dir string, lim bundle.Limits) (*bundle.Bundle, error) {
	tmp, err := os.MkdirTemp("", "cairn-validate-")
	if err != nil {
		return nil, fmt.Errorf("validate: %w", err)
	}
	defer os.RemoveAll(tmp)
	archive := bundle.PackStream(ctx, dir)
	b, err := bundle.Load(ctx, archive, filepath.Join(tmp, "tree"), lim)
	// The folder's own problems (Pack validates it first) name its files better
	// than the archive's reader can.
	if perr := archive.Close(); perr != nil {
		return nil, invalidBundle(dir, perr)
	}
	if err != nil {
		return nil, invalidBundle(dir, err)
	}
	return b, nil
}

// invalidBundle is err about the bundle folder dir: each problem on a line of its
// own under a line naming the folder.
func invalidBundle(dir string, err error) error {
	problems := bundle.ValidationErrors(err)
	if len(problems) == 0 {
		return fmt.Errorf("%s: %w", dir, err)
	}
	lines := make([]string, len(problems))
	for i, p := range problems {
		lines[i] = "  " + p.Error()
	}
	noun := "problem"
	if len(problems) > 1 {
		noun = "problems"
	}
	return &bundleProblems{err: err, text: fmt.Sprintf("%s: invalid bundle, %d %s:\n%s", dir, len(problems), noun, strings.Join(lines, "\n"))}
}

// bundleProblems is an invalid bundle's error as the CLI prints it; it matches
// what the bundle's error matches (bundle.ErrInvalid).
type bundleProblems struct {
	err  error
	text string
}

func (e *bundleProblems) Error() string { return e.text }
func (e *bundleProblems) Unwrap() error { return e.err }

// printValid reports a valid bundle: its workflow, steps, digest, and the pins
// that only the server checks.
func printValid(w io.Writer, dir string, b *bundle.Bundle) {
	fmt.Fprintf(w, "%s: valid\nworkflow: %s\nsteps:    %d\ndigest:   %s\n", dir, b.Definition.Name, len(b.Definition.Steps)+len(b.Definition.OnFailure), b.Digest)
	for _, cw := range b.Manifest.ChildWorkflows() {
		fmt.Fprintf(w, "checked at deploy: step %q runs workflow %s version %d, which must exist on the server\n", cw.Step, cw.Name, cw.Version)
	}
}
