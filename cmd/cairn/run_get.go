package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

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
	case client.WaitingForKindUpstream:
		var keys []string
		for _, n := range deref(s.Needs) {
			if status[n] != client.StepStatusSucceeded {
				keys = append(keys, n)
			}
		}
		out = "upstream " + strings.Join(keys, ",")
	case client.WaitingForKindSleep:
		out = "sleep"
		if w.Until != nil {
			out += " until " + w.Until.UTC().Format(time.RFC3339) + " (" + relative(*w.Until, now) + ")"
		}
	case client.WaitingForKindSignal:
		out = "signal " + deref(w.Name)
	case client.WaitingForKindEvent:
		out = "event " + deref(w.Name)
	case client.WaitingForKindApproval:
		out = "approval"
		if w.Required != nil && w.Approvals != nil {
			out += fmt.Sprintf(" %d/%d", *w.Approvals, *w.Required)
		}
	case client.WaitingForKindChildRun:
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
