package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

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

// shortRunID is a short form of a run ID: 8 to 35 hex digits and dashes.
var shortRunID = regexp.MustCompile(`^[0-9a-fA-F-]{8,35}$`)

func (c *cli) newRunStartCmd() *cobra.Command {
	var (
		version        string
		input, idemKey string
		wait           bool
		labels         []string
		priority       int
		deadline       string
	)
	cmd := &cobra.Command{
		Use:   "start NAME",
		Short: "Start a run of a workflow and print its ID",
		Long: `start starts a run of workflow NAME: of the version the alias latest names, or
of --version N, or of the version --version ALIAS names (stable, canary, …). An
alias is resolved when the run is created; the run keeps that version.
--input takes JSON, or @file to read it from a file. --label (-l) key=value, repeated,
labels the run (find it with cairn run list -l key=value). With --wait it follows the
run until it ends, prints its steps, and fails unless the run succeeded.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := parseLabels(labels)
			if err != nil {
				return err
			}
			body := client.StartRunBody{}
			if cmd.Flags().Changed("priority") {
				if priority < 0 || priority > 9 {
					return fmt.Errorf("--priority %d: must be 0 to 9", priority)
				}
				p := int64(priority)
				body.Priority = &p
			}
			if deadline != "" {
				at, err := parseDeadline(deadline, time.Now())
				if err != nil {
					return err
				}
				body.Deadline = &at
			}
			return c.startRun(cmd.Context(), body, args[0], version, input, idemKey, l, wait)
		},
	}
	f := cmd.Flags()
	f.StringVar(&version, "version", "", "version number or alias to run (default: the alias latest)")
	f.StringVar(&input, "input", "", "the run's input: JSON, or @file")
	f.StringVar(&idemKey, "idempotency-key", "", "makes the start safe to retry: the same key returns the first run")
	f.BoolVar(&wait, "wait", false, "follow the run until it ends; fail unless it succeeded")
	f.StringArrayVarP(&labels, "label", "l", nil, "label the run: key=value (repeat for more)")
	f.StringVar(&deadline, "deadline", "", "fail the run (deadline_exceeded) if it has not ended by then: a duration from now (2h) or an RFC 3339 time")
	f.IntVar(&priority, "priority", 0, "the priority of every step of the run, 0..9 (higher first), in place of the steps' own")
	return cmd
}

func (c *cli) startRun(ctx context.Context, body client.StartRunBody, name string, version string, input, idemKey string, labels map[string]string, wait bool) error {
	if len(labels) > 0 {
		body.Labels = &labels
	}
	if err := startVersion(&body, version); err != nil {
		return err
	}
	if input != "" {
		raw, err := readInput(input)
		if err != nil {
			return err
		}
		body.Input = raw
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	run, err := cl.CreateRun(ctx, name, body, idemKey)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, run.Id)
	if !wait {
		return nil
	}
	id, err := parseRunID(run.Id)
	if err != nil {
		return err
	}
	if _, err := cl.WaitRun(ctx, id, client.WaitOptions{Follow: c.followOptions()}); err != nil {
		return stoppedFollowing(id, err)
	}
	return c.showRun(ctx, cl, id, false)
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

func (c *cli) newRunGetCmd() *cobra.Command {
	var out outputFormat
	var archived bool
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Show a run and its steps",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, cl, err := c.runClient(args[0])
			if err != nil {
				return err
			}
			if archived {
				return c.showArchivedRun(cmd.Context(), cl, id, out.json())
			}
			return c.showRun(cmd.Context(), cl, id, out.json())
		},
	}
	cmd.Flags().BoolVar(&archived, "archived", false, "read the run from its archive: a run that retention archived and deleted")
	out.register(cmd)
	return cmd
}

// fetchRun reads a run and its steps; op names the command in errors.
func fetchRun(ctx context.Context, cl *client.Client, id uuid.UUID, op string) (*client.GetRunResponse, *client.ListStepsResponse, error) {
	runResp, err := cl.GetRunWithResponse(ctx, id)
	if err != nil {
		return nil, nil, fmt.Errorf("get run %s: %w", id, err)
	}
	stepsResp, err := cl.ListStepsWithResponse(ctx, id)
	if err != nil {
		return nil, nil, fmt.Errorf("list steps of run %s: %w", id, err)
	}
	if runResp.JSON200 == nil || stepsResp.JSON200 == nil {
		return nil, nil, unexpected(op, runResp.StatusCode())
	}
	return runResp, stepsResp, nil
}

// showRun prints a run and its step table (or, as JSON, {"run": …, "steps": […]}
// with the API's shapes) and returns runResult for a finished run.
func (c *cli) showRun(ctx context.Context, cl *client.Client, id uuid.UUID, asJSON bool) error {
	runResp, stepsResp, err := fetchRun(ctx, cl, id, "get run")
	if err != nil {
		return err
	}
	if asJSON {
		var steps rawItems
		if err := json.Unmarshal(stepsResp.Body, &steps); err != nil {
			return fmt.Errorf("decode steps: %w", err)
		}
		return writeJSON(c.stdout, map[string]any{"run": json.RawMessage(runResp.Body), "steps": steps.Items})
	}
	return c.writeRun(runResp.JSON200, deref(stepsResp.JSON200.Items))
}

// writeRun prints a run and its step table, and returns runResult for a finished
// run.
func (c *cli) writeRun(run *client.Run, steps []client.Step) error {
	tw := newTable(c.stdout)
	fmt.Fprintf(tw, "run\t%s\n", run.Id)
	fmt.Fprintf(tw, "workflow\t%s (version %d)\n", run.Workflow, run.Version)
	fmt.Fprintf(tw, "status\t%s\n", run.Status)
	fmt.Fprintf(tw, "created\t%s\n", formatTime(run.CreatedAt))
	if len(run.Labels) > 0 {
		fmt.Fprintf(tw, "labels\t%s\n", formatLabels(run.Labels))
	}
	if run.ParentId != nil {
		parent := *run.ParentId
		if run.ParentStep != nil {
			parent += " (step " + *run.ParentStep + ")"
		}
		fmt.Fprintf(tw, "parent\t%s\n", parent)
	}
	fmt.Fprintf(tw, "duration\t%s\n", span(run.StartedAt, run.FinishedAt, time.Now()))
	if msg := errorMessage(run.Error); msg != "" {
		fmt.Fprintf(tw, "error\t%s\n", msg)
	}
	if run.Input != nil {
		in, _ := json.Marshal(run.Input)
		fmt.Fprintf(tw, "input\t%s\n", in)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout)
	if err := writeSteps(c.stdout, steps, time.Now()); err != nil {
		return err
	}
	if !run.Status.Terminal() {
		return nil
	}
	return runResult(run)
}

// writeSteps prints the step table: STEP, STATUS, ATTEMPTS (n/max), DURATION,
// WAITING FOR, INFO, in the order of the DAG (see dagOrder).
func writeSteps(w io.Writer, steps []client.Step, now time.Time) error {
	steps = dagOrder(steps)
	status := make(map[string]client.StepStatus, len(steps))
	for _, s := range steps {
		status[s.Key] = s.Status
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "STEP\tSTATUS\tATTEMPTS\tDURATION\tWAITING FOR\tINFO")
	for _, s := range steps {
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\t%s\n", s.Key, s.Status, s.Attempts, s.MaxAttempts,
			span(s.StartedAt, s.FinishedAt, now), waitingText(s, status, now), stepInfo(s, now))
	}
	return tw.Flush()
}

// waitingText says what an unfinished step waits for (the API's waiting_for): the
// steps it needs that have not succeeded yet, a sleep's end, a signal's name, a
// child run's ID, and when the wait times out; "-" when it waits for nothing.
func waitingText(s client.Step, status map[string]client.StepStatus, now time.Time) string {
	w := s.WaitingFor
	if w == nil {
		return "-"
	}
	var out string
	switch w.Kind {
	case client.Upstream:
		var keys []string
		for _, n := range deref(s.Needs) {
			if status[n] != client.StepStatusSucceeded {
				keys = append(keys, n)
			}
		}
		out = "upstream " + strings.Join(keys, ",")
	case client.Sleep:
		out = "sleep"
		if w.Until != nil {
			out += " until " + w.Until.UTC().Format(time.RFC3339) + " (" + relative(*w.Until, now) + ")"
		}
	case client.Signal:
		out = "signal " + deref(w.Name)
	case client.Approval:
		out = "approval"
		if w.Required != nil && w.Approvals != nil {
			out += fmt.Sprintf(" %d/%d", *w.Approvals, *w.Required)
		}
	case client.ChildRun:
		out = "child run"
		if w.RunId != nil {
			out += " " + w.RunId.String()
		}
	default:
		out = string(w.Kind)
	}
	if w.TimeoutAt != nil {
		out += ", timeout " + relative(*w.TimeoutAt, now)
		if w.OnTimeout != nil {
			out += " (" + string(*w.OnTimeout) + ")"
		}
	}
	return out
}

// relative says "in 5s" or "5s ago".
func relative(t, now time.Time) string {
	if d := t.Sub(now); d >= 0 {
		return "in " + formatDuration(d)
	}
	return formatDuration(now.Sub(t)) + " ago"
}

// dagOrder sorts steps by depth in the DAG (a step after everything it needs),
// then by key: the order a run goes through them. The API lists them by key.
func dagOrder(steps []client.Step) []client.Step {
	byKey := make(map[string]*client.Step, len(steps))
	for i := range steps {
		byKey[steps[i].Key] = &steps[i]
	}
	depth := make(map[string]int, len(steps))
	var depthOf func(key string, seen int) int
	depthOf = func(key string, seen int) int {
		if d, ok := depth[key]; ok {
			return d
		}
		d := 0
		if s, ok := byKey[key]; ok && s.Needs != nil && seen < len(steps) { // seen: no endless loop on a cycle
			for _, n := range *s.Needs {
				d = max(d, depthOf(n, seen+1)+1)
			}
		}
		depth[key] = d
		return d
	}
	// The failure handlers come after the workflow's steps, compensations first,
	// each group in the order it runs (the compensations by when their steps
	// finished, latest first).
	phase := map[client.StepPhase]int{client.Main: 0, client.Compensate: 1, client.OnFailure: 2}
	finished := func(s client.Step) time.Time {
		if s.Compensates != nil {
			if c, ok := byKey[*s.Compensates]; ok && c.FinishedAt != nil {
				return *c.FinishedAt
			}
		}
		return time.Time{}
	}
	out := slices.Clone(steps)
	slices.SortStableFunc(out, func(a, b client.Step) int {
		if c := cmp.Compare(phase[a.Phase], phase[b.Phase]); c != 0 {
			return c
		}
		if a.Phase == client.Compensate {
			if c := finished(b).Compare(finished(a)); c != 0 {
				return c
			}
		} else if c := cmp.Compare(depthOf(a.Key, 0), depthOf(b.Key, 0)); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out
}

// stepInfo says why a step is where it is: who runs it, when it may run again, and
// the error of its latest failed attempt.
func stepInfo(s client.Step, now time.Time) string {
	var parts []string
	switch {
	case s.Phase == client.Compensate && s.Compensates != nil:
		parts = append(parts, "compensates "+*s.Compensates)
	case s.Phase == client.OnFailure:
		parts = append(parts, "on_failure")
	}
	if s.SkipReason != nil {
		parts = append(parts, "skipped: "+string(*s.SkipReason))
		if *s.SkipReason == client.ConditionFalse {
			return strings.Join(parts, "; ")
		}
	}
	if s.Condition != nil && *s.Condition == client.StepConditionPending && s.Status == client.StepStatusReady {
		parts = append(parts, "condition pending")
	}
	if m := s.Map; m != nil {
		parts = append(parts, mapText(*m))
	}
	if s.Status == client.StepStatusRunning && s.LeaseOwner != nil {
		parts = append(parts, "on "+*s.LeaseOwner)
	}
	if s.BlockedBy != nil && s.BlockedBy.Kind == client.BlockedByKindPaused {
		parts = append(parts, "paused")
	}
	if s.Status == client.StepStatusReady && s.ReadyAt != nil && s.ReadyAt.After(now) {
		parts = append(parts, "ready in "+formatDuration(s.ReadyAt.Sub(now)))
	}
	if msg := errorMessage(s.LastError); msg != "" {
		switch s.Status {
		case client.StepStatusFailed, client.StepStatusSkipped, client.StepStatusCanceled:
		default: // the error of an earlier attempt
			msg = "last error: " + msg
		}
		parts = append(parts, msg)
	}
	return strings.Join(parts, "; ")
}

// mapText is a map's progress: "312/100000 ✓ 2 ✗" (succeeded of the items, and
// failed); "312/1200+ ✓ 2 ✗" while not every item has its instance yet.
func mapText(m client.MapProgress) string {
	total := strconv.FormatInt(m.Created, 10) + "+"
	if m.Total != nil {
		total = strconv.FormatInt(*m.Total, 10)
	}
	return fmt.Sprintf("%d/%s ✓ %d ✗", m.Succeeded, total, m.Failed)
}

func (c *cli) newRunListCmd() *cobra.Command {
	var (
		filter runFilterFlags
		limit  int
		out    outputFormat
		act    = map[string]*bool{}
		all    bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first; or act on every run the filter matches (--cancel, --retry, --pause, --resume)",
		Long: `list lists runs, newest first, that match every filter given:
  cairn run list -l tenant=acme --status failed --since 24h
--since and --until take a Go duration back from now (24h, 90m) or an RFC 3339 time;
--version needs --workflow; --error-code matches the code of the step error that failed
a run (its error.cause.code).

With --cancel, --retry, --pause or --resume it acts on every run the filters match
instead (a bulk operation on the server), followed with a progress bar:
  cairn run list --workflow orders --status failed --retry`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			params, err := filter.params(time.Now())
			if err != nil {
				return err
			}
			for _, action := range bulkActions {
				if *act[action] {
					return c.bulk(cmd.Context(), action, bulkFilter(params), all)
				}
			}
			return c.listRuns(cmd.Context(), params, limit, out)
		},
	}
	f := cmd.Flags()
	filter.register(f)
	f.IntVar(&limit, "limit", 100, "show at most this many (0: all)")
	for _, action := range bulkActions {
		act[action] = f.Bool(action, false, action+" every run the filter matches (a bulk operation on the server, followed with a progress bar)")
	}
	cmd.MarkFlagsMutuallyExclusive(bulkActions...)
	f.BoolVar(&all, "all", false, "with --cancel, --retry, --pause or --resume and no filter: act on every run")
	out.register(cmd)
	return cmd
}

func (c *cli) listRuns(ctx context.Context, params *client.ListRunsParams, limit int, out outputFormat) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	params.Limit = pageSize(limit)
	now := time.Now()
	return printList(c, cl.RunPages(ctx, params), limit, out, func(r *client.ListRunsResponse) ([]client.Run, []byte) {
		return deref(r.JSON200.Items), r.Body
	}, "ID\tWORKFLOW\tVERSION\tSTATUS\tSTEPS\tCREATED\tDURATION\tLABELS", func(r client.Run) string {
		return fmt.Sprintf("%s\t%s\t%d\t%s\t%d/%d\t%s\t%s\t%s", r.Id, r.Workflow, r.Version, r.Status,
			r.StepsTotal-r.StepsRemaining, r.StepsTotal, formatTime(r.CreatedAt), span(r.StartedAt, r.FinishedAt, now),
			formatLabels(r.Labels))
	})
}

func (c *cli) newRunCancelCmd() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a run: pending steps are canceled, running ones killed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, cl, err := c.runClient(args[0])
			if err != nil {
				return err
			}
			body := client.CancelRunRequest{}
			if reason != "" {
				body.Reason = &reason
			}
			resp, err := cl.CancelRunWithResponse(cmd.Context(), id, body)
			if err != nil {
				return fmt.Errorf("cancel run %s: %w", id, err)
			}
			if resp.JSON200 == nil {
				return unexpected("cancel run", resp.StatusCode())
			}
			fmt.Fprintf(c.stdout, "run %s %s\n", resp.JSON200.Id, resp.JSON200.Status)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded on the run")
	return cmd
}

// newRunPauseCmd is `cairn run pause ID` (pause) or `cairn run resume ID`.
func (c *cli) newRunPauseCmd(pause bool) *cobra.Command {
	var reason string
	use, short := "resume ID", "Resume a paused run: its steps start again"
	if pause {
		use, short = "pause ID", "Pause a run: no new attempt starts, running ones finish"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, cl, err := c.runClient(args[0])
			if err != nil {
				return err
			}
			body := client.ControlBody{}
			if reason != "" {
				body.Reason = &reason
			}
			var run *client.Run
			var status int
			if pause {
				resp, err := cl.PauseRunWithResponse(cmd.Context(), id, body)
				if err != nil {
					return fmt.Errorf("pause run %s: %w", id, err)
				}
				run, status = resp.JSON200, resp.StatusCode()
			} else {
				resp, err := cl.ResumeRunWithResponse(cmd.Context(), id, body)
				if err != nil {
					return fmt.Errorf("resume run %s: %w", id, err)
				}
				run, status = resp.JSON200, resp.StatusCode()
			}
			if run == nil {
				return unexpected(strings.Fields(use)[0]+" run", status)
			}
			fmt.Fprintf(c.stdout, "run %s %s%s\n", run.Id, run.Status, pauseReasonNote(run))
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the run's events")
	return cmd
}

// pauseReasonNote says why a paused run is paused, for a line about the run.
func pauseReasonNote(r *client.Run) string {
	if r.PauseReason == nil {
		return ""
	}
	return " (" + map[client.RunPauseReason]string{
		client.RunPauseReasonRun:       "by an operator",
		client.RunPauseReasonWorkflow:  "with its workflow",
		client.RunPauseReasonExhausted: "a step used up its attempts: resume to run it again",
	}[*r.PauseReason] + ")"
}

func (c *cli) newRunOutputCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "output ID STEP",
		Short: "Write a step's output (streamed) to stdout or a file",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, cl, err := c.runClient(args[0])
			if err != nil {
				return err
			}
			resp, err := cl.GetStepOutput(cmd.Context(), id, args[1])
			if err != nil {
				return fmt.Errorf("output of step %s: %w", args[1], err)
			}
			defer resp.Body.Close()
			return c.copyOut(resp.Body, file)
		},
	}
	cmd.Flags().StringVarP(&file, "output", "o", "", "file to write (default: stdout)")
	return cmd
}

func (c *cli) newRunLogsCmd() *cobra.Command {
	var attempt int64
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs ID STEP",
		Short: "Print the log (stderr) of a step's attempt, the newest by default",
		Long: "Print the log (stderr) of a step's attempt, the newest by default. While the attempt runs, what it has\n" +
			"logged so far (published about once a second). With --follow, keep printing as it logs until the attempt ends\n" +
			"(waiting for the step's first attempt if it has none yet).",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, cl, err := c.runClient(args[0])
			if err != nil {
				return err
			}
			if follow {
				return c.followLog(cmd.Context(), cl, id, args[1], attempt)
			}
			params := &client.GetAttemptLogParams{}
			if attempt > 0 {
				params.Attempt = &attempt
			}
			resp, err := cl.GetAttemptLog(cmd.Context(), id, args[1], params)
			if err != nil {
				return fmt.Errorf("log of step %s: %w", args[1], err)
			}
			defer resp.Body.Close()
			return c.copyOut(resp.Body, "")
		},
	}
	cmd.Flags().Int64Var(&attempt, "attempt", 0, "attempt number (0: the newest)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing the log as the attempt writes it, until it ends")
	return cmd
}

// followInterval is how often `cairn run logs --follow` asks for more.
const followInterval = time.Second

// followLog prints an attempt's log as it grows: it reads from the offset where
// the last read ended until the API says the attempt is complete. Attempt 0 is
// the step's newest attempt when following starts (the first, once it runs).
func (c *cli) followLog(ctx context.Context, cl *client.Client, id uuid.UUID, key string, attempt int64) error {
	for attempt == 0 {
		resp, err := cl.ListAttemptsWithResponse(ctx, id, key)
		if err != nil {
			return fmt.Errorf("attempts of step %s: %w", key, err)
		}
		if resp.JSON200 == nil {
			return unexpected("logs", resp.StatusCode())
		}
		if items := deref(resp.JSON200.Items); len(items) > 0 {
			attempt = items[len(items)-1].Number
			break
		}
		if err := sleepCtx(ctx, followInterval); err != nil {
			return err
		}
	}
	var offset int64
	for {
		resp, err := cl.GetAttemptLog(ctx, id, key, &client.GetAttemptLogParams{Attempt: &attempt, Offset: &offset})
		if err != nil {
			return fmt.Errorf("log of step %s: %w", key, err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return unexpected("logs", resp.StatusCode)
		}
		if at, err := strconv.ParseInt(resp.Header.Get("Cairn-Log-Offset"), 10, 64); err == nil && at > offset {
			fmt.Fprintf(c.stderr, "cairn: %d bytes of the log were not kept (only its tail is, while it runs)\n", at-offset)
			offset = at
		}
		n, err := io.Copy(c.stdout, resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("log of step %s: %w", key, err)
		}
		offset += n
		if resp.Header.Get("Cairn-Log-Complete") == "true" {
			return nil
		}
		if n == 0 {
			if err := sleepCtx(ctx, followInterval); err != nil {
				return err
			}
		}
	}
}

// sleepCtx waits d, or less when ctx ends (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// copyOut streams r to stdout, or to file: written beside it first and renamed into
// place, so that a broken download never leaves a truncated file under its name.
func (c *cli) copyOut(r io.Reader, file string) error {
	if file == "" || file == "-" {
		lw := &lastByteWriter{w: c.stdout}
		if _, err := io.Copy(lw, r); err != nil {
			return fmt.Errorf("download: %w", err)
		}
		// Keep the prompt on its own line on a terminal; pipes get the exact bytes.
		if lw.n > 0 && lw.last != '\n' && isTerminal(c.stdout) {
			fmt.Fprintln(c.stdout)
		}
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".part-*")
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	defer os.Remove(tmp.Name())              // after a successful rename this fails harmlessly
	if err := tmp.Chmod(0o644); err != nil { // CreateTemp makes it 0600
		tmp.Close()
		return fmt.Errorf("download to %s: %w", file, err)
	}
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return fmt.Errorf("download to %s: %w", file, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("download to %s: %w", file, err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("download to %s: %w", file, err)
	}
	return nil
}

// lastByteWriter remembers the last byte written through it.
type lastByteWriter struct {
	w    io.Writer
	n    int64
	last byte
}

func (l *lastByteWriter) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	if n > 0 {
		l.n += int64(n)
		l.last = p[n-1]
	}
	return n, err
}

// parseDeadline reads --deadline: a duration from now, or an RFC 3339 time.
func parseDeadline(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("--deadline %s: must be in the future", s)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--deadline %q: want a duration (2h) or an RFC 3339 time", s)
	}
	return t, nil
}
