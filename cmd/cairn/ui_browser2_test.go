package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestUIActionsInBrowser drives the rest of the web UI in Chromium, on a `cairn dev`
// of its own (setupBrowser's, with a few more workflows): the diff of two versions,
// the timeline of a run, rerun from a step with edited input, the approval of an
// approval step, pause and resume, a bulk cancel from the filtered runs list and
// the schedules page. As in TestUIInBrowser, each subtest waits for selectors and
// conditions, with deadlines, never by sleeping.
func TestUIActionsInBrowser(t *testing.T) {
	t.Parallel()
	e := setupBrowser(t)
	dir, err := os.MkdirTemp("", "cairn-ui2-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	write := func(name, body string) string {
		d := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(d, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, "cairn.yaml"), []byte(body), 0o644))
		return d
	}
	// versioned: two versions, the second with another step and another value.
	e.dev.deploy(t, write("versioned", "name: versioned\nsteps:\n  - {key: a, builtin: echo, with: {value: 1}}\n"))
	e.dev.deploy(t, write("versioned", "name: versioned\nsteps:\n  - {key: a, builtin: echo, with: {value: 2}}\n  - {key: b, needs: [a], builtin: noop}\n"))
	// mirror: b outputs the run's input (echo without value).
	e.dev.deploy(t, write("mirror", "name: mirror\nsteps:\n  - {key: a, builtin: echo, with: {value: 1}}\n  - {key: b, needs: [a], builtin: echo}\n"))
	// sign: an approval by one operator, then a step after it.
	e.dev.deploy(t, write("sign", "name: sign\nsteps:\n  - {key: sign-off, approval: {required: 1, roles: [operator]}}\n  - {key: after, needs: [sign-off], builtin: echo, with: {value: {done: true}}}\n"))
	// twice: its first attempt fails, the second (right after) succeeds.
	twice := write("twice", "name: twice\nsteps:\n  - {key: twice, exec: [\"./twice\"], retry: {max_attempts: 2, delay: 0s}}\n")
	require.NoError(t, os.WriteFile(filepath.Join(twice, "twice"), []byte("#!/bin/sh\ncat >/dev/null\n[ \"$CAIRN_ATTEMPT\" = 1 ] && exit 1\necho '{\"ok\": true}'\n"), 0o755))
	e.dev.deploy(t, twice)
	// boss: an approval by an admin only.
	e.dev.deploy(t, write("boss", "name: boss\nsteps:\n  - {key: sign-off, approval: {roles: [admin]}}\n"))
	// paid: waits for the signal paid, whose payload is its output.
	e.dev.deploy(t, write("paid", "name: paid\nsteps:\n  - {key: paid, signal: {name: paid}}\n  - {key: after, needs: [paid], builtin: echo, with: {value: {done: true}}}\n"))
	// clocked: a schedule that fires once a year, triggered by hand here.
	e.dev.deploy(t, write("clocked", "name: clocked\nschedules:\n  - {name: yearly, cron: \"0 0 1 1 *\"}\nsteps:\n  - {key: tick, builtin: echo, with: {value: tick}}\n"))

	// slots: a long sleep under a concurrency limit of one slot.
	e.dev.deploy(t, write("slots", "name: slots\nsteps:\n  - {key: nap, builtin: sleep, with: {duration: 10m}, timeout: 15m, concurrency: {name: slots, limit: 1}}\n"))

	t.Run("version_diff", func(t *testing.T) {
		b := e.operator(t)
		b.do(chromedp.Navigate(e.server+"/ui/workflows/versioned"), chromedp.WaitVisible(chromedp.ID("diff-form")))
		// The form proposes the latest version against the one before.
		require.Equal(t, "1", b.value("#diff-from"))
		require.Equal(t, "2", b.value("#diff-to"))
		b.submit(chromedp.Click(chromedp.ID("diff-go")))
		b.do(chromedp.WaitVisible(chromedp.ID("diff")))
		require.Contains(t, b.location(), "from=1")
		require.Contains(t, b.location(), "to=2")
		added := b.texts(`#diff .add`)
		removed := b.texts(`#diff .del`)
		require.Contains(t, strings.Join(removed, "\n"), `"value": 1`)
		require.Contains(t, strings.Join(added, "\n"), `"value": 2`)
		require.Contains(t, strings.Join(added, "\n"), `"key": "b"`)
		require.NotContains(t, strings.Join(removed, "\n"), `"key": "a"`, "a line in both is no change")
		b.shoot("workflow-diff.png")
	})

	t.Run("timeline", func(t *testing.T) {
		// examples/fanout started from its page: the run page, loaded before its
		// steps have all started, ends with one timeline bar per step, without a reload.
		b := e.operator(t)
		b.do(chromedp.Navigate(e.server+"/ui/workflows/fanout"), chromedp.WaitVisible(chromedp.ID("start-run")))
		b.submit(chromedp.Click(chromedp.ID("start-run")))
		b.do(chromedp.WaitVisible(chromedp.ID("dag")), chromedp.Evaluate[chromedp.Void](`window.cairnMark = 1`))
		b.do(b.poll(`document.getElementById('run-status').textContent === 'succeeded' &&
			document.querySelectorAll('#timeline .bar.st-succeeded').length === 10`))
		require.Equal(t, 10, b.eval(`document.querySelectorAll('#dag .node').length`))
		require.Equal(t, 10, b.eval(`document.querySelectorAll('#timeline .bar rect.run').length`), "a bar per step")
		require.Equal(t, 1, b.eval(`window.cairnMark === 1 ? 1 : 0`), "no reload")
		keys := b.texts(`#timeline .bar text`)
		require.Equal(t, "split", keys[0], "bars in start order")
		require.Equal(t, "join", keys[9])
		b.shoot("run-fanout-timeline.png")
	})

	t.Run("timeline_attempts", func(t *testing.T) {
		// A step of two attempts: a segment each on its timeline row.
		run := e.startRun(t, "twice", "--wait")
		b := e.operator(t)
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+run), chromedp.WaitVisible(chromedp.ID("timeline")))
		require.Equal(t, 2, b.eval(`document.querySelectorAll('#timeline .bar[data-key=twice] rect.attempt').length`))
		require.Equal(t, 1, b.eval(`document.querySelectorAll('#timeline rect.attempt[data-attempt="1"].st-failed').length`))
		require.Equal(t, 1, b.eval(`document.querySelectorAll('#timeline rect.attempt[data-attempt="2"].st-succeeded').length`))
	})

	t.Run("rerun_edited_input", func(t *testing.T) {
		old := e.startRun(t, "mirror", "--input", `{"n": 1}`, "--wait")
		b := e.operator(t)
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+old+"?step=b"), chromedp.WaitVisible(chromedp.ID("output")))
		require.Contains(t, b.text("#output"), `"n": 1`)
		b.do(
			chromedp.Click(chromedp.CSS(`#step-actions details summary`)),
			chromedp.WaitVisible(chromedp.CSS(`form.rerun textarea`)),
			chromedp.SetValue(chromedp.CSS(`form.rerun textarea`), `{"edited": true}`),
		)
		b.submit(chromedp.Click(chromedp.ID("rerun")))
		b.do(chromedp.WaitVisible(chromedp.ID("run")))
		id := b.attr("#run", "data-run")
		require.NotEqual(t, old, id, "a new run")
		b.do(b.poll(`document.getElementById('run-status').textContent === 'succeeded'`))
		require.Contains(t, b.text("p.meta"), "rerun of "+old+" from b")
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+id+"?step=b"), chromedp.WaitVisible(chromedp.ID("output")))
		require.Contains(t, b.text("#output"), `"edited": true`, "b ran again on the edited input")
	})

	t.Run("approve", func(t *testing.T) {
		run := e.startRun(t, "sign")
		// A viewer sees the wait but no button.
		v := e.login(t, e.dev.creds["CAIRN_VIEWER_TOKEN"])
		v.do(chromedp.Navigate(e.server+"/ui/runs/"+run+"?step=sign-off"),
			v.poll(`document.getElementById('waiting-for') !== null`))
		require.Contains(t, v.text("#waiting-for"), "approval: 0/1 approvals")
		require.Zero(t, v.eval(`document.querySelectorAll('#approve, #reject').length`))

		b := e.operator(t)
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+run+"?step=sign-off"),
			b.poll(`document.getElementById('approve') !== null`),
			chromedp.SendKeys(chromedp.ID("decide-comment"), "looks good"))
		b.shoot("step-approval.png")
		b.submit(chromedp.Click(chromedp.ID("approve")))
		b.do(b.poll(`document.getElementById('run-status').textContent === 'succeeded'`))
		require.Contains(t, b.location(), "step=sign-off", "back on the step's panel")
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+run+"?step=sign-off"), chromedp.WaitVisible(chromedp.ID("output")))
		require.Contains(t, b.text("#output"), "looks good")
		require.Contains(t, b.text("#output"), "approved_by")
		require.Zero(t, b.eval(`document.querySelectorAll('#approve').length`), "nothing left to approve")
		require.Equal(t, "succeeded", e.runStatus(t, run))
	})

	t.Run("approve_roles", func(t *testing.T) {
		// An approval of admins only: an operator sees no button, an admin does.
		run := e.startRun(t, "boss")
		b := e.operator(t)
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+run+"?step=sign-off"),
			b.poll(`document.getElementById('waiting-for') !== null`))
		require.Zero(t, b.eval(`document.querySelectorAll('#approve, #reject').length`))
		a := e.login(t, e.dev.creds["CAIRN_ADMIN_TOKEN"])
		a.do(chromedp.Navigate(e.server+"/ui/runs/"+run+"?step=sign-off"),
			a.poll(`document.getElementById('approve') !== null`))
		a.submit(chromedp.Click(chromedp.ID("approve")))
		a.do(a.poll(`document.getElementById('run-status').textContent === 'succeeded'`))
	})

	t.Run("reject", func(t *testing.T) {
		run := e.startRun(t, "sign")
		b := e.operator(t)
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+run+"?step=sign-off"),
			b.poll(`document.getElementById('reject') !== null`),
			chromedp.SendKeys(chromedp.ID("decide-comment"), "not today"))
		dialog := b.acceptDialogs()
		b.submit(chromedp.Click(chromedp.ID("reject")))
		select {
		case msg := <-dialog:
			require.Contains(t, msg, "Reject this step?")
		case <-time.After(5 * time.Second):
			t.Fatal("reject did not ask first")
		}
		b.do(b.poll(`document.getElementById('run-status').textContent === 'failed'`), chromedp.WaitVisible(chromedp.ID("last-error")))
		require.Contains(t, b.text("#last-error"), "rejected")
		require.Contains(t, b.text("#last-error"), "not today")
		require.Equal(t, "failed", e.runStatus(t, run))
	})

	t.Run("signal", func(t *testing.T) {
		run := e.startRun(t, "paid")
		b := e.operator(t)
		// The form is open and offers the name the run waits for.
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+run+"?step=paid"),
			b.poll(`document.getElementById('waiting-for') !== null && document.getElementById('waiting-for').textContent.includes('signal')`),
			chromedp.Navigate(e.server+"/ui/runs/"+run+"?step=paid"),
			chromedp.WaitVisible(chromedp.ID("signal-name")))
		require.Equal(t, "paid", b.value("#signal-name"))
		require.Contains(t, b.text("#signal-name"), "waited for now")
		b.shoot("signal-wait.png")
		b.do(chromedp.SetValue(chromedp.ID("signal-payload"), `{"amount": 5}`))
		b.submit(chromedp.Click(chromedp.ID("send-signal")))
		require.Equal(t, "Signal paid sent.", b.text("#flash"), "the page says what the action did")
		b.do(b.poll(`document.getElementById('run-status').textContent === 'succeeded'`))
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+run+"?step=paid"), chromedp.WaitVisible(chromedp.ID("output")))
		require.Contains(t, b.text("#output"), `"amount": 5`)
		require.Equal(t, 1, b.eval(`document.getElementById('signal-box') === null || document.getElementById('signal-box').hidden ? 1 : 0`),
			"no signal to a run that has ended")
	})

	t.Run("pause_resume", func(t *testing.T) {
		held := e.startRun(t, "held")
		b := e.operator(t)
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+held),
			b.poll(`document.getElementById('run-status').textContent === 'running'`),
			chromedp.WaitVisible(chromedp.ID("pause")))
		require.Zero(t, b.eval(`document.getElementById('resume').hidden ? 0 : 1`), "no resume for a running run")
		b.submit(chromedp.Click(chromedp.ID("pause")))
		b.do(b.poll(`document.getElementById('run-status').textContent === 'paused' && !document.getElementById('resume').hidden`))
		require.Equal(t, "paused", e.runStatus(t, held))
		require.Equal(t, 1, b.eval(`document.getElementById('pause').hidden ? 1 : 0`))
		b.submit(chromedp.Click(chromedp.ID("resume")))
		b.do(b.poll(`document.getElementById('run-status').textContent === 'running' && !document.getElementById('pause').hidden`))
		require.Equal(t, "running", e.runStatus(t, held))
		e.cli(t, "run", "cancel", held)
	})

	t.Run("bulk_cancel", func(t *testing.T) {
		batch := fmt.Sprintf("batch=b%d", time.Now().UnixNano())
		var mine []string
		for range 3 {
			mine = append(mine, e.startRun(t, "held", "-l", batch))
		}
		other := e.startRun(t, "held", "-l", "batch=other")
		t.Cleanup(func() { _, _ = e.cliResult("run", "cancel", other) })
		b := e.operator(t)
		// The unfiltered list offers no action on every run.
		b.do(chromedp.Navigate(e.server+"/ui/runs"), chromedp.WaitVisible(chromedp.ID("filters")))
		require.Zero(t, b.eval(`document.querySelectorAll('#bulk').length`), "no bulk action on the unfiltered list")
		b.submit(
			chromedp.SetValue(chromedp.CSS(`#filters select[name=workflow]`), "held"),
			chromedp.SendKeys(chromedp.CSS(`#filters input[name=label]`), batch),
			chromedp.Click(chromedp.CSS(`#filters button[type=submit]`)),
		)
		b.do(chromedp.WaitVisible(chromedp.ID("bulk")))
		require.ElementsMatch(t, mine, b.listedRuns())
		require.Equal(t, "", b.value(`#bulk select[name=action]`), "no action chosen beforehand")
		b.do(chromedp.SetValue(chromedp.CSS(`#bulk select[name=action]`), "cancel"))
		// It asks first, naming the action and the number of runs.
		b.submit(chromedp.Click(chromedp.CSS(`#bulk button[type=submit]`)))
		require.Equal(t, "Cancel 3 runs?", b.text("#confirm-title"))
		require.Contains(t, b.text("#confirm-text"), "label "+batch)
		b.shoot("bulk-confirm.png")
		b.submit(chromedp.Click(chromedp.ID("confirm")))
		// The operation's page follows it to its end: the three runs canceled, each listed.
		b.do(chromedp.WaitVisible(chromedp.ID("operation")),
			b.poll(`document.getElementById('operation') && document.getElementById('operation').dataset.status === 'succeeded'`))
		require.Contains(t, b.text("h1"), "Bulk cancel")
		require.Equal(t, "3", b.attr("#operation", "data-total"))
		require.Equal(t, "3", b.attr("#operation", "data-applied"))
		b.do(b.poll(`document.querySelectorAll('#op-runs tr[data-outcome=applied]').length === 3`))
		require.ElementsMatch(t, mine, b.attrs(`#op-runs tr[data-run]`, "data-run"))
		b.shoot("bulk-operation.png")
		// Back to the filtered list: every run of the batch canceled, the other runs on.
		b.submit(chromedp.Click(chromedp.CSS(`[data-back]`)))
		b.do(chromedp.WaitVisible(chromedp.ID("runs")))
		require.ElementsMatch(t, mine, b.listedRuns())
		for _, id := range mine {
			require.Eventually(t, func() bool { return e.runStatus(t, id) == "canceled" }, 20*time.Second, 50*time.Millisecond,
				"waiting for run %s to be canceled", id)
		}
		require.Equal(t, "running", e.runStatus(t, other))
	})

	t.Run("schedules", func(t *testing.T) {
		b := e.operator(t)
		row := `#schedules tr[data-schedule]`
		b.do(chromedp.Navigate(e.server+"/ui/schedules"), chromedp.WaitVisible(chromedp.CSS(row)))
		require.Contains(t, b.text(row), "clocked")
		b.submit(chromedp.Click(chromedp.CSS(row + ` .pause-schedule`)))
		b.do(chromedp.WaitVisible(chromedp.CSS(row + ` .resume-schedule`)))
		require.Equal(t, "true", b.attr(row, "data-paused"))
		b.submit(chromedp.Click(chromedp.CSS(row + ` .resume-schedule`)))
		b.do(chromedp.WaitVisible(chromedp.CSS(row + ` .pause-schedule`)))
		require.Equal(t, "false", b.attr(row, "data-paused"))
		// Trigger now (asked first) leads to the run it started.
		dialogs := b.acceptDialogs()
		b.submit(chromedp.Click(chromedp.CSS(row + ` .trigger-schedule`)))
		select {
		case <-dialogs:
		case <-time.After(5 * time.Second):
			t.Fatal("trigger did not ask first")
		}
		b.do(chromedp.WaitVisible(chromedp.ID("run")), b.poll(`document.getElementById('run-status').textContent === 'succeeded'`))
		b.do(b.poll(`document.querySelector('h1').textContent.includes('clocked')`))
		// A viewer sees the schedule and no button.
		v := e.login(t, e.dev.creds["CAIRN_VIEWER_TOKEN"])
		v.do(chromedp.Navigate(e.server+"/ui/schedules"), chromedp.WaitVisible(chromedp.CSS(row)))
		require.Zero(t, v.eval(`document.querySelectorAll('main button').length`))
	})

	t.Run("limits", func(t *testing.T) {
		// Two runs under one slot: one runs, one waits for the slot.
		e.startRun(t, "slots")
		e.startRun(t, "slots")
		row := `#limit-keys tr[data-limit=slots]`
		a := e.login(t, e.dev.creds["CAIRN_ADMIN_TOKEN"])
		a.do(chromedp.Navigate(e.server+"/ui/limits"), chromedp.WaitVisible(chromedp.CSS(row)))
		require.Equal(t, "1", a.text(row+` td.in-use`))
		require.Equal(t, "1", a.text(row+` td.limit`))
		// An admin changes the limit; the page says so and shows it.
		a.submit(chromedp.SendKeys(chromedp.ID("limit-name"), "slots"), chromedp.SendKeys(chromedp.ID("limit-concurrency"), "3"),
			chromedp.Click(chromedp.ID("limit-submit")))
		a.do(chromedp.WaitVisible(chromedp.ID("limit-set")))
		require.Equal(t, "3", a.text(`#limit-overrides tr[data-limit=slots] td.limit`))
		// An operator and a viewer see the limits, and no form.
		for _, token := range []string{e.dev.creds["CAIRN_OPERATOR_TOKEN"], e.dev.creds["CAIRN_VIEWER_TOKEN"]} {
			v := e.login(t, token)
			v.do(chromedp.Navigate(e.server+"/ui/limits"), chromedp.WaitVisible(chromedp.ID("limit-overrides")))
			require.Zero(t, v.eval(`document.querySelectorAll('main form, main button').length`))
		}
	})

	eventSubtests(t, e)
	debuggingSubtests(t, e)
}

// texts returns the text of every element sel matches.
func (b *browserTab) texts(sel string) []string {
	b.t.Helper()
	out, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll(`+"`"+sel+"`"+`)).map(e => e.textContent)`))
	require.NoError(b.t, err, sel)
	return out
}

// attrs returns the attribute name of every element sel matches.
func (b *browserTab) attrs(sel, name string) []string {
	b.t.Helper()
	out, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll(`+"`"+sel+"`"+`)).map(e => e.getAttribute("`+name+`"))`))
	require.NoError(b.t, err, sel)
	return out
}
