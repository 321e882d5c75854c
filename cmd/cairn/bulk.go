package main

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/google/uuid"
	"github.com/schollz/progressbar/v3"

	"github.com/cairnrun/cairn/client"
)

// bulkPollInterval is how often `cairn run list --cancel …` asks for the operation's
// progress.
const bulkPollInterval = 500 * time.Millisecond

// bulkLogInterval is how often the progress is printed as a line when stderr is not
// a terminal (logs, CI), instead of a bar.
const bulkLogInterval = 5 * time.Second

// bulkActions are the flags of `cairn run list` that act on the listed runs.
var bulkActions = []string{"cancel", "retry", "pause", "resume"}

// bulk creates a bulk operation applying action to every run filter matches, then
// follows it to its end: a progress bar on stderr (a line every few seconds when
// stderr is not a terminal) and a summary on stdout. An empty filter is refused
// unless all is set: it would act on every run of the server.
func (c *cli) bulk(ctx context.Context, action string, filter client.RunFilterParams, all bool) error {
	if reflect.ValueOf(filter).IsZero() && !all {
		return errors.New("no filter: this would " + action + " every run; give a filter (--workflow, --status, …) or --all")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.BulkRunsWithResponse(ctx, client.BulkRunsJSONRequestBody{Action: client.BulkBodyAction(action), Filter: filter})
	if err != nil {
		return fmt.Errorf("bulk %s: %w", action, err)
	}
	if resp.JSON202 == nil {
		return unexpected("bulk "+action, resp.StatusCode())
	}
	op := *resp.JSON202
	fmt.Fprintf(c.stderr, "operation %s: %s %d runs\n", op.Id, action, op.Total)

	bar := progressbar.NewOptions64(op.Total,
		progressbar.OptionSetWriter(c.stderr),
		progressbar.OptionSetDescription(action),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetVisibility(isTerminal(c.stderr)),
		progressbar.OptionClearOnFinish(),
	)
	id, err := uuid.Parse(op.Id)
	if err != nil {
		return fmt.Errorf("bulk %s: operation id %q: %w", action, op.Id, err)
	}
	lastLog := time.Now()
	for op.Status == client.OperationStatusRunning {
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped following operation %s (it goes on on the server): %w", op.Id, ctx.Err())
		case <-time.After(bulkPollInterval):
		}
		got, err := cl.GetOperationWithResponse(ctx, id)
		if err != nil {
			return fmt.Errorf("operation %s: %w", op.Id, err)
		}
		if got.JSON200 == nil {
			return unexpected("get operation", got.StatusCode())
		}
		op = *got.JSON200
		_ = bar.Set64(op.Processed)
		if !isTerminal(c.stderr) && time.Since(lastLog) >= bulkLogInterval {
			fmt.Fprintf(c.stderr, "%s: %d/%d runs\n", action, op.Processed, op.Total)
			lastLog = time.Now()
		}
	}
	_ = bar.Finish()
	fmt.Fprintf(c.stdout, "operation %s %s: %d runs, %d applied, %d skipped\n", op.Id, op.Status, op.Processed, op.Applied, op.Skipped)
	if op.Skipped > 0 {
		fmt.Fprintf(c.stdout, "skipped runs and why: GET /v1/operations/%s/runs\n", op.Id)
	}
	if op.Status != client.OperationStatusSucceeded {
		return fmt.Errorf("operation %s %s", op.Id, op.Status)
	}
	return nil
}

// bulkFilter is the filter of a bulk operation that matches the runs a list with
// these parameters shows.
func bulkFilter(p *client.ListRunsParams) client.RunFilterParams {
	f := client.RunFilterParams{
		Workflow: p.Workflow, Label: p.Label, Version: p.Version, CreatedAfter: p.CreatedAfter,
		CreatedBefore: p.CreatedBefore, ErrorCode: p.ErrorCode, Parent: p.Parent,
	}
	if p.Status != nil {
		st := client.RunFilterParamsStatus(*p.Status)
		f.Status = &st
	}
	return f
}
