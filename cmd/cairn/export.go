package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/testrun"
)

func (c *cli) newRunExportCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "export ID",
		Short: "Write a run as a test fixture (JSON) for cairn test --replay",
		Long: `export writes a run as a fixture to stdout: its input and labels, and per step
the digest of its definition, how it ended, its attempts' outcomes and its output
as the server stores it (a secret never is; a large output as its $blob reference:
digest and size). cairn test --replay FILE replays it on a bundle: the steps whose
definition did not change reuse their recorded outcomes (docs/testing.md).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, cl, err := c.runClient(args[0])
			if err != nil {
				return err
			}
			fx, err := exportRun(cmd.Context(), cl, id)
			if err != nil {
				return err
			}
			return writeJSON(c.stdout, fx)
		},
	}
}

// exportedStep is a step of GET /v1/runs/{id}/steps, with its output as sent.
type exportedStep struct {
	Key        string          `json:"key"`
	Status     string          `json:"status"`
	SkipReason string          `json:"skip_reason"`
	Attempts   int             `json:"attempts"`
	FinishedAt *time.Time      `json:"finished_at"`
	Output     json.RawMessage `json:"output"`
}

// exportRun reads run id into a fixture.
func exportRun(ctx context.Context, cl *client.Client, id uuid.UUID) (*testrun.Fixture, error) {
	runResp, stepsResp, err := fetchRun(ctx, cl, id, "export run")
	if err != nil {
		return nil, err
	}
	run := runResp.JSON200
	if run.InputOmitted != nil && *run.InputOmitted {
		return nil, fmt.Errorf("export run %s: the server left its input out", id)
	}
	var raw struct {
		Input json.RawMessage `json:"input"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(runResp.Body, &raw); err != nil {
		return nil, fmt.Errorf("export run %s: decode the run: %w", id, err)
	}
	var steps struct {
		Items []exportedStep `json:"items"`
	}
	if err := json.Unmarshal(stepsResp.Body, &steps); err != nil {
		return nil, fmt.Errorf("export run %s: decode its steps: %w", id, err)
	}
	vResp, err := cl.GetVersionWithResponse(ctx, run.Workflow, run.Version)
	if err != nil {
		return nil, fmt.Errorf("export run %s: get version %d of %s: %w", id, run.Version, run.Workflow, err)
	}
	if vResp.JSON200 == nil || vResp.JSON200.Definition == nil {
		return nil, unexpected("export run: get version", vResp.StatusCode())
	}
	defJSON, err := json.Marshal(vResp.JSON200.Definition)
	if err != nil {
		return nil, err
	}
	def, err := bundle.ParseDefinition(defJSON)
	if err != nil {
		return nil, fmt.Errorf("export run %s: version %d of %s: %w", id, run.Version, run.Workflow, err)
	}
	digests, err := testrun.StepDigests(def)
	if err != nil {
		return nil, err
	}
	kinds := map[string]*bundle.StepDefinition{}
	for i := range def.Steps {
		kinds[def.Steps[i].Key] = &def.Steps[i]
	}
	fx := &testrun.Fixture{Format: testrun.FixtureFormat, RunID: id.String(), Workflow: run.Workflow, Version: int(run.Version),
		Digest: vResp.JSON200.Digest, Status: string(run.Status), ErrorCode: raw.Error.Code, Input: raw.Input, Labels: run.Labels}
	for _, s := range steps.Items {
		fs := testrun.FixtureStep{Key: s.Key, Definition: digests[s.Key], Status: s.Status, SkipReason: s.SkipReason}
		if fs.Definition == "" {
			// A map instance (KEY[i]) or a step the definition does not list:
			// a replay runs the state machine, which makes them again.
			continue
		}
		if s.FinishedAt != nil {
			at := testrun.Duration(s.FinishedAt.Sub(run.CreatedAt))
			fs.At = &at
		}
		if len(s.Output) > 0 && string(s.Output) != "null" {
			fs.Output, fs.OutputDigest = s.Output, testrun.Digest(s.Output)
		}
		if d := kinds[s.Key]; d != nil {
			if d.Signal != nil {
				fs.Signal = d.Signal.Name
			}
			fs.Approval = d.Approval != nil
		}
		if s.Attempts > 0 {
			resp, err := cl.ListAttemptsWithResponse(ctx, id, s.Key)
			if err != nil {
				return nil, fmt.Errorf("export run %s: attempts of step %s: %w", id, s.Key, err)
			}
			var attempts struct {
				Items []struct {
					Status string          `json:"status"`
					Error  json.RawMessage `json:"error"`
				} `json:"items"`
			}
			if err := json.Unmarshal(resp.Body, &attempts); err != nil || resp.JSON200 == nil {
				return nil, unexpected("export run: list attempts", resp.StatusCode())
			}
			for _, a := range attempts.Items {
				switch a.Status {
				case "succeeded", "failed", "timed_out":
					fa := testrun.FixtureAttempt{Status: a.Status}
					if len(a.Error) > 0 && string(a.Error) != "null" {
						fa.Error = a.Error
					}
					fs.Attempts = append(fs.Attempts, fa)
				}
			}
		}
		fx.Steps = append(fx.Steps, fs)
	}
	return fx, nil
}
