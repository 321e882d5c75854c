package ui

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	openapi_types "github.com/oapi-codegen/runtime/types"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/client"
)

// stepView is the step panel's data.
type stepView struct {
	RunID     string
	RunStatus string
	// RunEnded: the run is terminal (the panel offers a rerun from the step).
	RunEnded bool
	Step     client.Step
	// Info says why the step is where it is, as the CLI's INFO column does: its
	// skip reason, the step it compensates, the run it was reused from.
	Info []string
	// ReusedFrom is the run a rerun's reused step took its output from.
	ReusedFrom string
	// TryAttempts are the attempts of the current try (a retry gives a step a
	// fresh budget of MaxAttempts); Tries how many tries the run had.
	TryAttempts int64
	Tries       int64
	Attempts    []attemptView
	Log         string
	LogAttempt  int64
	LogCut      bool
	// LiveAttempt is the running attempt whose live tail the panel shows (Live,
	// from LiveNext on: the page's script asks for more from there).
	LiveAttempt int64
	Live        string
	LiveNext    int64
	Output      string
	OutputBlob  bool
	Checkpoint  string
	CkptBlob    bool
	// Err is the step's error: shown only on a step that did not succeed.
	Err      *errView
	RunInput string
	// Approval: the step waits for approvals (the panel offers approve and reject).
	Approval bool
	// Items: a map step (the panel links to its items).
	Items bool
	// EventWait is what a wait_for_event step waits for: the event's name and
	// its match (from the run's version).
	EventWait *eventWait
}

type attemptView struct {
	client.Attempt
	// Shown is the attempt's outcome as people read it: an attempt that ended by
	// suspending its step (a signal, approval, sleep or callback wait, a map's
	// instances) is "suspended", not "succeeded".
	Shown    string
	Try      int64
	Duration string
	Err      *errView
	// Last: the step's latest attempt, whose error the panel shows above as the
	// step's (an attempt's error line is shown for the earlier ones only).
	Last bool
}

// logTail is how much of the end of an attempt's log the panel shows.
const logTail = 16 << 10

func (h *Handler) panel(r *http.Request, s *session, id openapi_types.UUID, key string) (*stepView, error) {
	ctx := r.Context()
	steps, err := s.api.ListStepsWithResponse(ctx, id)
	if err != nil {
		return nil, err
	}
	run, err := s.api.GetRunWithResponse(ctx, id)
	if err != nil {
		return nil, err
	}
	v := &stepView{RunID: id.String(), RunStatus: string(run.JSON200.Status), RunEnded: run.JSON200.Status.Terminal(),
		RunInput: pretty(run.JSON200.Input)}
	found := false
	for _, st := range deref(steps.JSON200.Items) {
		if st.Key == key {
			v.Step, found = st, true
		}
	}
	if !found {
		return nil, fmt.Errorf("no step %q", key)
	}
	st := v.Step
	switch {
	case st.Phase == client.Compensate && st.Compensates != nil:
		v.Info = append(v.Info, "compensates "+*st.Compensates)
	case st.Phase == client.OnFailure:
		v.Info = append(v.Info, "on_failure handler: runs when the run fails")
	}
	if st.SkipReason != nil {
		v.Info = append(v.Info, "skipped: "+string(*st.SkipReason))
	}
	if run.JSON200.RerunOf != nil && st.Status == client.StepStatusSucceeded && st.Attempts == 0 {
		v.ReusedFrom = run.JSON200.RerunOf.String()
	}
	v.Items = st.Map != nil
	// The attempts of earlier tries: those the step had when a retry replaced it.
	var earlier []int64
	if hist, err := s.api.ListStepHistoryWithResponse(ctx, id); err == nil {
		for _, t := range deref(hist.JSON200.Items) {
			v.Tries = max(v.Tries, t.Try)
			if t.Step.Key == key {
				earlier = append(earlier, t.Step.Attempts)
			}
		}
	}
	prev := int64(0)
	if len(earlier) > 0 {
		prev = slices.Max(earlier)
	}
	v.TryAttempts = st.Attempts - prev
	waits := h.waitSteps(r, s, run.JSON200)
	at, err := s.api.ListAttemptsWithResponse(ctx, id, key)
	if err != nil {
		return nil, err
	}
	list := deref(at.JSON200.Items)
	for i, a := range list {
		av := attemptView{Attempt: a, Shown: string(a.Status), Err: errorOf(a.Error), Try: int64(v.Tries) + 1}
		for j, n := range earlier {
			if a.Number <= n {
				av.Try = int64(j) + 1
				break
			}
		}
		if a.Status == client.AttemptStatusSucceeded && (waits[key] || st.Map != nil ||
			(i == len(list)-1 && st.Status != client.StepStatusSucceeded)) {
			av.Shown = "suspended"
		}
		if a.FinishedAt != nil {
			av.Duration = a.FinishedAt.Sub(a.StartedAt).Round(time.Millisecond).String()
		} else {
			av.Duration = time.Since(a.StartedAt).Round(time.Second).String() + " so far"
		}
		av.Last = i == len(list)-1 && st.Status != client.StepStatusSucceeded
		v.Attempts = append(v.Attempts, av)
		if a.HasLog {
			v.LogAttempt = a.Number
		}
		if a.Status == client.AttemptStatusRunning {
			v.LiveAttempt = a.Number
		}
	}
	if v.LiveAttempt > 0 {
		resp, err := s.api.GetAttemptLog(ctx, id, key, &client.GetAttemptLogParams{Attempt: &v.LiveAttempt})
		if err == nil {
			cr := &countingReader{r: resp.Body}
			v.Live, _ = tail(cr, logTail)
			resp.Body.Close()
			at, _ := strconv.ParseInt(resp.Header.Get("Cairn-Log-Offset"), 10, 64)
			v.LiveNext = at + cr.n
		}
	}
	if v.LogAttempt > 0 {
		resp, err := s.api.GetAttemptLog(ctx, id, key, &client.GetAttemptLogParams{Attempt: &v.LogAttempt})
		if err == nil {
			v.Log, v.LogCut = tail(resp.Body, logTail)
			resp.Body.Close()
		}
	}
	if st.Output != nil {
		v.Output, v.OutputBlob = pretty(st.Output), isBlob(st.Output)
	}
	if st.Checkpoint != nil {
		v.Checkpoint, v.CkptBlob = pretty(st.Checkpoint), isBlob(st.Checkpoint)
	}
	if st.Status != client.StepStatusSucceeded {
		v.Err = errorOf(st.LastError).withRetry(st.LastError, st)
	}
	v.EventWait = h.eventWaitOf(r, s, run.JSON200, st)
	v.Approval = st.WaitingFor != nil && st.WaitingFor.Kind == client.WaitingForKindApproval && !run.JSON200.Status.Terminal() &&
		s.canOperate() && h.mayDecide(r, s, run.JSON200, key)
	return v, nil
}

// waitSteps are the steps of the run's version whose attempt suspends the step
// (signal, approval and wait_for_event steps): their attempts show as suspended.
func (h *Handler) waitSteps(r *http.Request, s *session, run *client.Run) map[string]bool {
	out := map[string]bool{}
	if def := h.definition(r, s, run); def != nil {
		for _, st := range def.Steps {
			if st.Signal != nil || st.Approval != nil || st.WaitForEvent != nil {
				out[st.Key] = true
			}
		}
	}
	return out
}

// mayDecide reports whether the session's role is among the roles of the approval
// step key (admin always is), as its run's version defines them; when the
// definition cannot be read, the buttons are shown and the API decides.
func (h *Handler) mayDecide(r *http.Request, s *session, run *client.Run, key string) bool {
	if s.who.Role >= api.RoleAdmin {
		return true
	}
	def := h.definition(r, s, run)
	if def == nil {
		return true
	}
	for _, st := range def.Steps {
		if st.Key == key && st.Approval != nil {
			return slices.Contains(st.Approval.Roles, s.who.Role.String())
		}
	}
	return true
}
