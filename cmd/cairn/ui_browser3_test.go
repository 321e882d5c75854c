package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// debuggingSubtests drive the UI as the place where someone on call finds out why
// a run is stuck or failed (docs/ui.md), on TestUIActionsInBrowser's `cairn dev`
// and browser, one subtest per problem the UI solves: status that explains
// itself, history, live updates, maps, finding a run, the step panel, errors,
// human in the loop, the basics, bulk actions. Each asserts what the page shows
// and saves its screenshots (light and dark).
func debuggingSubtests(t *testing.T, e *browserEnv) {
	dir, err := os.MkdirTemp("", "cairn-ui3-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	g := newGate(t)
	write := func(name, body string, files map[string]string) {
		d := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(d, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(d, "cairn.yaml"), []byte(body), 0o644))
		for f, script := range files {
			require.NoError(t, os.WriteFile(filepath.Join(d, f), []byte(script), 0o755))
		}
		e.dev.deploy(t, d)
	}
	// lane: a concurrency limit of one slot, held ten minutes.
	write("lane", "name: lane\nsteps:\n  - {key: nap, builtin: sleep, with: {duration: 10m}, timeout: 15m, concurrency: {name: lane, limit: 1}}\n", nil)
	// undo: reserve is compensated when ship fails (its first attempt, its only
	// one); notify runs on failure. A retry then succeeds.
	write("undo", `name: undo
on_failure:
  - {key: notify, builtin: echo, with: {value: "order failed"}}
steps:
  - key: reserve
    builtin: echo
    with: {value: {reserved: 2}}
    compensate: {builtin: echo, with: {value: released}}
  - {key: gift, needs: [reserve], when: "input.gift == true", builtin: echo, with: {value: wrapped}}
  - {key: ship, needs: [reserve, gift], after: none_failed, builtin: fail, with: {times: 1, message: "carrier down\nretry later"}, retry: {max_attempts: 1}}
`, nil)
	// gatedundo: as undo, but ship waits at the gate before it fails.
	write("gatedundo", fmt.Sprintf(`name: gatedundo
on_failure:
  - {key: notify, builtin: echo, with: {value: "order failed"}}
steps:
  - key: reserve
    builtin: echo
    with: {value: {reserved: 2}}
    compensate: {builtin: echo, with: {value: released}}
  - {key: ship, needs: [reserve], exec: ["./ship"], network: {allow: ["127.0.0.1:%d"]}, retry: {max_attempts: 1}}
`, g.port()), map[string]string{"ship": fmt.Sprintf("#!/bin/bash\ncat >/dev/null\nread -r word </dev/tcp/127.0.0.1/%d\necho 'ship: no carrier' >&2\nexit 3\n", g.port())})
	// thumbs: a map of five items, one of which fails (tolerated).
	write("thumbs", `name: thumbs
steps:
  - {key: split, builtin: echo, with: {value: {items: ["a", "b", "bad", "c", "d"]}}}
  - key: each
    needs: [split]
    map: {over: "deps.split.items", tolerate_failures: 1}
    exec: ["./each"]
    retry: {max_attempts: 1}
`, map[string]string{"each": "#!/bin/bash\nin=$(cat)\ncase \"$in\" in *'\"item\":\"bad\"'*) echo \"each: item bad fails on purpose\" >&2; exit 1;; esac\necho '{\"ok\": true}'\n"})
	// many: a map of mapItems items.
	var items bytes.Buffer
	for i := range mapItems() {
		if i > 0 {
			items.WriteString(", ")
		}
		fmt.Fprint(&items, i)
	}
	write("many", "name: many\nsteps:\n  - {key: split, builtin: echo, with: {value: {items: ["+items.String()+"]}}}\n"+
		"  - {key: each, needs: [split], map: {over: \"deps.split.items\", max_parallel: 500}, builtin: echo}\n", nil)
	// heldmap: a map of three items that wait at their own gate, so that the page
	// sees a map working however slowly it loads.
	mg := newGate(t)
	write("heldmap", fmt.Sprintf(`name: heldmap
steps:
  - {key: split, builtin: echo, with: {value: {items: [1, 2, 3]}}}
  - {key: each, needs: [split], map: {over: "deps.split.items"}, exec: ["./each"], network: {allow: ["127.0.0.1:%d"]}}
`, mg.port()), map[string]string{"each": fmt.Sprintf("#!/bin/bash\ncat >/dev/null\nread -r word </dev/tcp/127.0.0.1/%d\necho '{\"ok\": true}'\n", mg.port())})

	t.Run("status_explains_itself", func(t *testing.T) {
		paid := e.startRun(t, "paid")
		sign := e.startRun(t, "sign")
		first := e.startRun(t, "lane")
		second := e.startRun(t, "lane")
		broken := e.startRun(t, "broken")
		t.Cleanup(func() {
			for _, id := range []string{paid, sign, first, second} {
				_, _ = e.cliResult("run", "cancel", id)
			}
		})
		b := e.operator(t)
		row := func(id string) string { return `#runs tr[data-run="` + id + `"] td.why` }
		// The list says what each run waits for or is blocked by, and why a failed
		// run failed: the list refreshes itself until it does.
		b.do(chromedp.Navigate(e.server+"/ui/runs"), chromedp.WaitVisible(chromedp.ID("runs")),
			b.poll(`(document.querySelector('`+row(second)+`') || {}).textContent?.includes('blocked') &&
				document.querySelector('`+row(broken)+`')?.textContent.includes('broken on purpose') &&
				document.querySelector('`+row(paid)+`')?.textContent.includes('signal paid')`))
		require.Equal(t, "waiting: signal paid", b.text(row(paid)))
		require.Equal(t, "waiting: approval 0/1 (sign-off)", b.text(row(sign)))
		require.Equal(t, "blocked: concurrency lane 1/1", b.text(row(second)))
		require.Equal(t, "running: nap", b.text(row(first)))
		require.Regexp(t, `^step broken: (\S+: )?broken on purpose$`, b.text(row(broken)))
		b.shoot("runs-why.png")

		// The run page: the waiting step has a state of its own in the graph.
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+paid), chromedp.WaitVisible(chromedp.ID("dag")))
		require.Equal(t, "waiting: signal paid", b.text("#run-why"))
		require.Equal(t, "wait-signal", b.attr(`#dag .node[data-key=paid]`, "data-state"))
		require.Equal(t, "", b.attr(`#dag .node[data-key=after]`, "data-state"), "a step waiting for its needs is not waiting for a signal")
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+second), chromedp.WaitVisible(chromedp.ID("dag")))
		require.Equal(t, "blocked", b.attr(`#dag .node[data-key=nap]`, "data-state"))
		b.shoot("run-blocked.png")
	})

	t.Run("history_and_tries", func(t *testing.T) {
		b := e.operator(t)
		id := e.startRun(t, "undo", "--input", `{"gift": false}`)
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+id), b.poll(`document.getElementById('run-status').textContent === 'failed'`),
			chromedp.Navigate(e.server+"/ui/runs/"+id), chromedp.WaitVisible(chromedp.ID("events")))
		require.Contains(t, b.text("#events"), "run.compensating")
		b.submit(chromedp.Click(chromedp.ID("retry")))
		require.Contains(t, b.text("#flash"), "Run retried")
		b.do(b.poll(`document.getElementById('run-status').textContent === 'succeeded'`),
			chromedp.Navigate(e.server+"/ui/runs/"+id), chromedp.WaitVisible(chromedp.ID("events")))
		// The compensation and the on_failure step of the first try are still on the
		// page, with the step the retry ran again.
		tried := b.attrs(`#try-1 tr[data-key]`, "data-key")
		require.Subset(t, tried, []string{"compensate-reserve", "notify", "ship"})
		require.Contains(t, b.text(`#try-1 tr[data-key="compensate-reserve"]`), "compensates reserve")
		// The history names who retried it.
		require.Equal(t, "operator", b.text(`#events tr[data-type="run.retried"] td.actor`))
		b.shoot("run-history.png")
		// Filtered to what people did: the retry, not the steps' events.
		b.submit(chromedp.Click(chromedp.CSS(`#history-kinds a[href*="events=people"]`)))
		require.Contains(t, b.location(), "events=people")
		types := b.attrs(`#events tr[data-type]`, "data-type")
		require.Contains(t, types, "run.retried")
		require.NotContains(t, types, "step.succeeded")
	})

	t.Run("live_new_steps_and_lists", func(t *testing.T) {
		b := e.operator(t)
		id := e.startRun(t, "gatedundo")
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+id),
			b.poll(`document.querySelector('#dag .node[data-key=ship]').getAttribute('data-status') === 'running'`))
		require.Zero(t, b.eval(`document.querySelectorAll('#dag .node[data-key="compensate-reserve"]').length`), "no compensation before the failure")
		require.Equal(t, 1, b.eval(`document.getElementById('run-error-box').hidden ? 1 : 0`))
		b.do(chromedp.Evaluate[chromedp.Void](`window.cairnMark = 1`))
		g.open()
		// The compensation and on_failure steps the failure created, and the run's
		// error, appear without a reload.
		b.do(b.poll(`document.querySelector('#dag .node[data-key="compensate-reserve"]') && document.querySelector('#dag .node[data-key=notify]') &&
			document.getElementById('run-status').textContent === 'failed' && (document.getElementById('run-error') || {}).textContent?.includes('no carrier')`))
		require.Equal(t, 1, b.eval(`window.cairnMark === 1 ? 1 : 0`), "no reload")
		require.Contains(t, b.text("#run-error"), "step ship")
		b.shoot("run-live-compensated.png")

		// The runs list shows a run started after it was loaded, without a reload.
		b.do(chromedp.Navigate(e.server+"/ui/runs"), chromedp.WaitVisible(chromedp.ID("runs")), chromedp.Evaluate[chromedp.Void](`window.cairnMark = 1`))
		later := e.startRun(t, "tagged")
		b.do(b.poll(`document.querySelector('#runs tr[data-run="` + later + `"]') !== null`))
		require.Equal(t, 1, b.eval(`window.cairnMark === 1 ? 1 : 0`), "no reload")
	})

	t.Run("map_items", func(t *testing.T) {
		id := e.startRun(t, "thumbs", "--wait")
		b := e.operator(t)
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+id), chromedp.WaitVisible(chromedp.ID("dag")))
		require.Equal(t, []string{"4/5 ✓ 1 ✗"}, b.texts(`#dag .node[data-key=each] text.map`), "as the CLI counts: succeeded, failed")
		require.Contains(t, b.text("#progress"), "2 steps + 5 items")
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+id+"?step=each"), chromedp.WaitVisible(chromedp.ID("items-link")))
		require.Empty(t, b.texts("#last-error"), "no error on a map that succeeded within its tolerance")
		b.submit(chromedp.Click(chromedp.ID("items-link")))
		require.Len(t, b.attrs(`#items tr[data-index]`, "data-index"), 5)
		// Only the failed items; the failed one's log opens.
		b.submit(chromedp.SetValue(chromedp.ID("items-status"), "failed"), chromedp.Click(chromedp.CSS(`#items-filter button`)))
		require.Equal(t, []string{"2"}, b.attrs(`#items tr[data-index]`, "data-index"))
		b.shoot("map-items.png")
		b.submit(chromedp.Click(chromedp.CSS(`#items tr[data-index="2"] a`)))
		require.Equal(t, "failed", b.text("#item-status"))
		require.Contains(t, b.text("#log"), "item bad fails on purpose")
		require.Contains(t, b.text("#item-value"), `"bad"`)
		b.shoot("map-item.png")
	})

	t.Run("map_many_items", func(t *testing.T) {
		held := e.startRun(t, "heldmap")
		t.Cleanup(func() { _, _ = e.cliResult("run", "cancel", held) })
		b := e.operator(t)
		// While its items run the map is working, not waiting.
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+held),
			b.poll(`document.querySelector('#dag .node[data-key=each]').getAttribute('data-state') === 'working'`))
		require.Contains(t, b.attr(`#dag .node[data-key=each]`, "class"), "ns-working")
		mg.open()
		b.do(b.pollFor(3*time.Minute, `document.getElementById('run-status').textContent === 'succeeded'`))

		id := e.startRun(t, "many")
		t.Cleanup(func() { _, _ = e.cliResult("run", "cancel", id) })
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+id), b.pollFor(3*time.Minute, `document.getElementById('run-status').textContent === 'succeeded'`))
		start := time.Now()
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+id+"/steps/each/items"), chromedp.WaitVisible(chromedp.ID("items")))
		took := time.Since(start)
		require.Len(t, b.attrs(`#items tr[data-index]`, "data-index"), 100)
		n := mapItems()
		require.Equal(t, fmt.Sprintf("%d/%d ✓", n, n), b.text("#items-progress"))
		t.Logf("the items page of a map of %d items rendered in %s (the server built it in %s)", n, took.Round(time.Millisecond), b.attr("#items-progress", "data-elapsed"))
		b.submit(chromedp.Click(chromedp.ID("next-page")))
		require.Equal(t, "100", b.attrs(`#items tr[data-index]`, "data-index")[0], "the second page starts at item 100")
	})

	t.Run("find_anything", func(t *testing.T) {
		id := e.startRun(t, "tagged", "-l", "find=me", "--wait")
		short := id[len(id)-12:]
		b := e.operator(t)
		// The short ID the list shows, typed into the search box ('/' focuses it).
		b.do(chromedp.Navigate(e.server+"/ui/runs"), chromedp.WaitVisible(chromedp.ID("runs")),
			chromedp.KeyEvent("/"), b.poll(`document.activeElement === document.getElementById('search-q')`))
		// (The key's character reaches the box the key focused: clear it.)
		b.submit(chromedp.Evaluate[chromedp.Void](`document.getElementById('search-q').value = ''`), chromedp.SendKeys(chromedp.ID("search-q"), short+"\r"))
		require.Equal(t, id, b.attr("#run", "data-run"))
		// In the URL, as a link would have it.
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+short), chromedp.WaitVisible(chromedp.ID("run")))
		require.Equal(t, id, b.attr("#run", "data-run"))
		// The first digits, as the CLI prints them, work too when unique enough; a
		// label and a workflow's name list runs.
		b.submit(chromedp.Navigate(e.server + "/ui/search?q=find%3Dme"))
		require.Equal(t, []string{id}, b.listedRuns())
		b.submit(chromedp.Navigate(e.server + "/ui/search?q=tagged"))
		require.Contains(t, b.location(), "workflow=tagged")
		// An unknown ID gets a page that says so.
		status := b.submit(chromedp.Navigate(e.server + "/ui/runs/000000000000"))
		require.Equal(t, 404, status)
		require.Contains(t, b.text("#message"), "No run has the ID 000000000000")
		b.shoot("run-not-found.png")
		status = b.submit(chromedp.Navigate(e.server + "/ui/runs/0190a1b2-0000-7000-8000-000000000000"))
		require.Equal(t, 404, status)
		require.Contains(t, b.text("#message"), "No run has the ID")
		// The CLI takes the short ID as well.
		out, _ := e.cliResult("run", "get", short)
		require.Contains(t, out, id)
		_, err := e.cliResult("run", "get", "000000000000")
		require.ErrorContains(t, err, "no run has the ID 000000000000")
	})

	t.Run("step_panel_agrees_with_cli", func(t *testing.T) {
		id := e.startRun(t, "undo", "--input", `{"gift": false}`)
		b := e.operator(t)
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+id), b.poll(`document.getElementById('run-status').textContent === 'failed'`))
		// A skipped step says why; a compensation what it undoes.
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+id+"?step=gift"), chromedp.WaitVisible(chromedp.ID("step-why")))
		require.Equal(t, "skipped: condition_false", b.text("#step-why"))
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+id+"?step=compensate-reserve"), chromedp.WaitVisible(chromedp.ID("step-why")))
		require.Equal(t, "compensates reserve", b.text("#step-why"))
		require.Empty(t, b.texts("#last-error"), "no error on a step that succeeded")
		// After a retry, attempts count per try.
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+id), chromedp.WaitVisible(chromedp.ID("retry")))
		b.submit(chromedp.Click(chromedp.ID("retry")))
		b.do(b.poll(`document.getElementById('run-status').textContent === 'succeeded'`),
			chromedp.Navigate(e.server+"/ui/runs/"+id+"?step=ship"), chromedp.WaitVisible(chromedp.ID("step-attempts")))
		require.Equal(t, "1/1", b.text("#step-attempts"), "one attempt of one in this try")
		require.Contains(t, b.text("#step-meta"), "2 in all")
		require.Empty(t, b.texts("#last-error"), "the first try's error is not the succeeded step's")
		b.shoot("step-retried.png")
		// A rerun's reused step says where it came from.
		b.do(chromedp.Click(chromedp.CSS(`#step-actions details summary`)), chromedp.WaitVisible(chromedp.ID("rerun")))
		b.submit(chromedp.Click(chromedp.ID("rerun")))
		require.Contains(t, b.text("#flash"), "Rerun started from step ship")
		rerun := b.attr("#run", "data-run")
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+rerun+"?step=reserve"), chromedp.WaitVisible(chromedp.ID("step-why")))
		require.Contains(t, b.text("#step-why"), "reused from run "+id[len(id)-12:])
		// An approval step's attempt shows as suspended, not succeeded.
		sign := e.startRun(t, "sign")
		t.Cleanup(func() { _, _ = e.cliResult("run", "cancel", sign) })
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+sign+"?step=sign-off"), b.poll(`document.getElementById('waiting-for') !== null`),
			chromedp.Navigate(e.server+"/ui/runs/"+sign+"?step=sign-off"), chromedp.WaitVisible(chromedp.ID("attempts")))
		require.Equal(t, []string{"suspended"}, b.attrs(`#attempts tr[data-attempt]`, "data-shown"))
	})

	t.Run("errors_for_people", func(t *testing.T) {
		id := e.startRun(t, "undo", "--input", `{"gift": false}`)
		b := e.operator(t)
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+id+"?step=ship"), b.poll(`document.getElementById('run-status').textContent === 'failed'`),
			chromedp.Navigate(e.server+"/ui/runs/"+id+"?step=ship"), chromedp.WaitVisible(chromedp.ID("last-error")))
		// One line with the code and the message's first line; the rest and the JSON
		// behind a toggle; retryable not said of a step that will not try again.
		require.Regexp(t, `^Failed: step ship: (\S+: )?carrier down$`, b.text("#run-error"))
		require.Contains(t, b.text("#last-error"), "carrier down")
		require.NotContains(t, b.text("#last-error"), "retryable")
		require.NotContains(t, b.text("#last-error"), "{")
		require.Zero(t, b.eval(`Array.from(document.querySelectorAll('pre.json')).filter(p => p.checkVisibility() && p.textContent.includes('"code"')).length`),
			"no error JSON in sight before a toggle opens")
		require.Equal(t, 1, b.eval(`Array.from(document.querySelectorAll('main')).filter(m => (m.innerText.match(/carrier down/g) || []).length <= 3).length`),
			"the error is not repeated once per place")
		b.do(chromedp.Click(chromedp.CSS(`#step-error details summary`)))
		require.Contains(t, b.text(`#step-error details`), "retry later", "the message's next line, with its line break")
		b.shoot("run-failed.png")
	})

	t.Run("human_in_the_loop", func(t *testing.T) {
		run := e.startRun(t, "sign")
		b := e.operator(t)
		// The inbox lists the step waiting for an approval the operator may give.
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+run+"?step=sign-off"), b.poll(`document.getElementById('waiting-for') !== null`),
			chromedp.Navigate(e.server+"/ui/approvals"), chromedp.WaitVisible(chromedp.ID("approvals")))
		require.Equal(t, "sign-off", b.attr(`#approvals tr[data-run="`+run+`"]`, "data-step"))
		b.shoot("approvals.png")
		b.submit(chromedp.Click(chromedp.CSS(`#approvals tr[data-run="` + run + `"] a.decide-link`)))
		b.do(b.poll(`document.getElementById('approve') !== null`))
		b.submit(chromedp.Click(chromedp.ID("approve")))
		require.Equal(t, "Step sign-off: approve recorded.", b.text("#flash"))
		b.do(b.poll(`document.getElementById('run-status').textContent === 'succeeded'`))
		// Pausing a workflow asks first, naming how many runs it pauses.
		h1, h2 := e.startRun(t, "held"), e.startRun(t, "held")
		t.Cleanup(func() {
			_, _ = e.cliResult("workflows", "resume", "held")
			_, _ = e.cliResult("run", "cancel", h1)
			_, _ = e.cliResult("run", "cancel", h2)
		})
		b.do(chromedp.Navigate(e.server+"/ui/workflows/held"), chromedp.WaitVisible(chromedp.ID("pause-workflow")))
		b.submit(chromedp.Click(chromedp.ID("pause-workflow")))
		require.Equal(t, "Pause workflow held?", b.text("#confirm-title"))
		require.Regexp(t, regexp.MustCompile(`its \d+ unfinished runs`), b.text("#confirm-text"))
		b.submit(chromedp.Click(chromedp.ID("confirm")))
		require.Equal(t, "Workflow held paused.", b.text("#flash"))
		b.submit(chromedp.Click(chromedp.ID("resume-workflow")))
		require.Contains(t, b.text("#flash"), "Workflow held resumed")
	})

	t.Run("basics", func(t *testing.T) {
		id := e.startRun(t, "tagged", "--wait")
		b := e.operator(t)
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+id), chromedp.WaitVisible(chromedp.ID("run")))
		// The title names the page and the run; the current section is marked.
		title, err := chromedp.Run(b.ctx, chromedp.Title())
		require.NoError(t, err)
		require.Equal(t, "Run "+id[len(id)-12:]+" of tagged (succeeded) · Cairn", title)
		require.Equal(t, "Runs", b.text(`#nav a.current`))
		// Times in the browser's zone with how long ago, UTC on hover; a duration.
		require.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \((\d+s|\d+m) ago\)$`, b.text(`.meta time`))
		require.Regexp(t, `Z$`, b.attr(`.meta time`, "title"))
		require.Regexp(t, `took \d`, b.text("#run-took"))
		// g then s goes to the schedules, where a paused schedule has no next fire.
		b.do(chromedp.KeyEvent("g"), chromedp.KeyEvent("s"), chromedp.WaitVisible(chromedp.ID("schedules")))
		require.Equal(t, "Schedules", b.text(`#nav a.current`))
		row := `#schedules tr[data-schedule]`
		b.submit(chromedp.Click(chromedp.CSS(row + ` .pause-schedule`)))
		require.Equal(t, "Schedule paused.", b.text("#flash"))
		require.Equal(t, "none: paused", b.text(row+` td.next-fire`))
		b.shoot("schedules.png")
		b.submit(chromedp.Click(chromedp.CSS(row + ` .resume-schedule`)))
		require.NotContains(t, b.text(row+` td.next-fire`), "paused")
		// Filters are controls: a choice of workflows and statuses, times as pickers.
		b.do(chromedp.Navigate(e.server+"/ui/runs"), chromedp.WaitVisible(chromedp.ID("filters")))
		require.Contains(t, b.texts(`#filter-workflow option`), "tagged")
		require.Equal(t, "datetime-local", b.attr(`#filters input[name=created_after]`, "type"))
		// Dark mode follows the system.
		b.shoot("runs.png")
		dark := b.darkBackground()
		require.True(t, dark, "the page is dark when the system prefers dark")
	})

	t.Run("bulk_selected", func(t *testing.T) {
		batch := fmt.Sprintf("pick=p%d", time.Now().UnixNano())
		one, two, kept := e.startRun(t, "held", "-l", batch), e.startRun(t, "held", "-l", batch), e.startRun(t, "held", "-l", batch)
		done := e.startRun(t, "tagged", "-l", batch, "--wait")
		t.Cleanup(func() { _, _ = e.cliResult("run", "cancel", kept) })
		b := e.operator(t)
		b.do(chromedp.Navigate(e.server+"/ui/runs?label="+batch), chromedp.WaitVisible(chromedp.ID("runs")))
		for _, id := range []string{one, two, done} {
			b.do(chromedp.Click(chromedp.CSS(`#runs tr[data-run="` + id + `"] input.pick`)))
		}
		b.do(chromedp.SetValue(chromedp.CSS(`#bulk-selected select[name=action]`), "cancel"))
		b.submit(chromedp.Click(chromedp.ID("bulk-selected-go")))
		require.Equal(t, "Cancel 3 selected runs?", b.text("#confirm-title"))
		b.submit(chromedp.Click(chromedp.ID("confirm")))
		// The result lists each run: two canceled, the finished one skipped and why.
		require.Equal(t, "applied", b.attr(`#op-runs tr[data-run="`+one+`"]`, "data-outcome"))
		require.Equal(t, "applied", b.attr(`#op-runs tr[data-run="`+two+`"]`, "data-outcome"))
		require.Equal(t, "skipped", b.attr(`#op-runs tr[data-run="`+done+`"]`, "data-outcome"))
		require.Contains(t, b.text(`#op-runs tr[data-run="`+done+`"]`), "finished")
		b.shoot("bulk-selected.png")
		require.Equal(t, "running", e.runStatus(t, kept), "a run not ticked goes on")
	})
}

// mapItems is the size of the map whose items page the browser test renders:
// CAIRN_UI_MAP_ITEMS (10000 for the size docs/ui.md states), 1,000 by default, a
// map that ends in seconds on two loaded cores.
func mapItems() int {
	if n, err := strconv.Atoi(os.Getenv("CAIRN_UI_MAP_ITEMS")); err == nil && n > 0 {
		return n
	}
	return 1000
}

// pollFor waits until a JavaScript condition holds on the current page, for up
// to d.
func (b *browserTab) pollFor(d time.Duration, expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(100*time.Millisecond))
}

// darkBackground reports whether the page's background is dark with the system
// preferring dark.
func (b *browserTab) darkBackground() bool {
	b.t.Helper()
	var dark bool
	b.withScheme("dark", func() {
		dark = b.eval(`(() => { const m = getComputedStyle(document.body).backgroundColor.match(/\d+/g).map(Number); return m[0] + m[1] + m[2] < 150 ? 1 : 0 })()`) == 1
	})
	return dark && strings.TrimSpace(b.text("body")) != ""
}
