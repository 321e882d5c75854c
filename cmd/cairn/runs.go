package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

func newRunCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	c := newCLI(e, stdout, stderr)
	cmd := &cobra.Command{
		Use:     "run",
		Aliases: []string{"runs"},
		Short:   "Start, follow and inspect runs",
	}
	c.registerFlags(cmd)
	cmd.AddCommand(
		c.newRunStartCmd(),
		c.newRunGetCmd(),
		c.newRunListCmd(),
		c.newRunWatchCmd(),
		c.newRunCancelCmd(),
		c.newRunRetryCmd(),
		c.newRunRerunCmd(),
		c.newRunPauseCmd(true),
		c.newRunPauseCmd(false),
		c.newRunSignalCmd(),
		c.newRunOutputCmd(),
		c.newRunLogsCmd(),
		c.newRunDecideCmd(true),
		c.newRunDecideCmd(false),
		c.newRunExportCmd(),
	)
	return cmd
}

// runEndedError reports a run that ended other than succeeded.
type runEndedError struct {
	ID     string           // the run's ID
	Status client.RunStatus // failed or canceled
	Reason string           // the run's error message, if any
}

func (e *runEndedError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("run %s %s", e.ID, e.Status)
	}
	return fmt.Sprintf("run %s %s: %s", e.ID, e.Status, e.Reason)
}

// runResult is nil for a succeeded run, else a *runEndedError.
func runResult(r *client.Run) error {
	if r.Status == client.RunStatusSucceeded {
		return nil
	}
	return &runEndedError{ID: r.Id, Status: r.Status, Reason: errorMessage(r.Error)}
}

func parseRunID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, fmt.Errorf("run ID %q is not a UUID", s)
	}
	return id, nil
}

// runClient reads a run ID argument and returns it with a client. A short ID (the
// last 12 hex digits the web UI shows, or the first 8 or more) is looked up on
// the server (GET /v1/runs:lookup): it must name one run.
func (c *cli) runClient(arg string) (uuid.UUID, *client.Client, error) {
	id, err := parseRunID(arg)
	if err != nil && !shortRunID.MatchString(arg) {
		return uuid.Nil, nil, err
	}
	cl, cerr := c.client()
	if cerr != nil {
		return uuid.Nil, nil, cerr
	}
	if err == nil {
		return id, cl, nil
	}
	res, err := cl.LookupRunsWithResponse(context.Background(), &client.LookupRunsParams{Id: arg})
	if err != nil {
		return uuid.Nil, nil, fmt.Errorf("look up run %s: %w", arg, err)
	}
	runs := deref(res.JSON200.Items)
	switch len(runs) {
	case 0:
		return uuid.Nil, nil, fmt.Errorf("no run has the ID %s", arg)
	case 1:
		return uuid.MustParse(runs[0].Id), cl, nil
	}
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.Id
	}
	return uuid.Nil, nil, fmt.Errorf("the ID %s names several runs (%s): give more of it", arg, strings.Join(ids, ", "))
}

// stoppedFollowing says, when the user interrupted, that the run goes on.
func stoppedFollowing(id uuid.UUID, err error) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("stopped following run %s, which goes on (cairn run watch %s): %w", id, id, err)
	}
	return err
}

// readInput reads --input: JSON, or @file. It is checked here so that a typo is
// reported, with its place, before a run starts.
func readInput(s string) (json.RawMessage, error) {
	b, what := []byte(s), "--input"
	if name, ok := strings.CutPrefix(s, "@"); ok {
		var err error
		if b, err = os.ReadFile(name); err != nil {
			return nil, fmt.Errorf("read input: %w", err)
		}
		what = name
	}
	if err := checkJSON(b); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON: %w", what, err)
	}
	return json.RawMessage(b), nil
}

// checkJSON returns nil for valid JSON, else where the first mistake is: `line 3,
// column 11 (byte 25): invalid character 'x' …`.
func checkJSON(b []byte) error {
	var v any
	err := json.Unmarshal(b, &v)
	var syntax *json.SyntaxError
	if !errors.As(err, &syntax) {
		return err
	}
	// Offset counts the bytes read, the bad one included (all of them at an
	// unexpected end): the mistake is at the byte before.
	at := min(max(syntax.Offset-1, 0), int64(len(b)))
	if syntax.Offset >= int64(len(b)) && strings.Contains(syntax.Error(), "unexpected end") {
		at = int64(len(b))
	}
	line := 1 + bytes.Count(b[:at], []byte("\n"))
	col := int(at) - bytes.LastIndexByte(b[:at], '\n')
	return fmt.Errorf("line %d, column %d (byte %d): %s", line, col, at, syntax.Error())
}

// shortRunID is a short form of a run ID: 8 to 35 hex digits and dashes.
var shortRunID = regexp.MustCompile(`^[0-9a-fA-F-]{8,35}$`)
