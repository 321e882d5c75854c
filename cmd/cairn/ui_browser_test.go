package main

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestUIInBrowser drives the web UI of a real `cairn dev` in Debian's Chromium
// (headless; `make tools` installs it), as a user would: each subtest opens its own
// browser context (its own cookies) and asserts what the page shows.
//
// The subtests share one `cairn dev` and one browser, which take most of the time
// to start, and run one after another (not t.Parallel): the machine has two cores,
// and a subtest's time is then its own. Each takes a few seconds; none waits by
// sleeping: it waits for a selector or a condition, with a deadline.
//
// Screenshots of the runs list and of examples/fanout's run page go to the
// subtest's artifact folder (t.ArtifactDir: kept under -outputdir with
// -artifacts, as `make test` passes them; a temporary folder otherwise).
func TestUIInBrowser(t *testing.T) {
	t.Parallel()
	e := setupBrowser(t)

	t.Run("login", func(t *testing.T) {
		b := e.tab(t)
		// Not logged in: a run list's URL leads to the login page, which comes back
		// to it after logging in.
		b.do(chromedp.Navigate(e.server+"/ui/runs?workflow=tagged"), chromedp.WaitVisible(chromedp.ID("token")))
		require.Contains(t, b.location(), "/ui/login?next=")
		// A wrong token is refused, and said so.
		b.submit(chromedp.SendKeys(chromedp.ID("token"), "not-a-token"), chromedp.Click(chromedp.ID("login")))
		b.do(chromedp.WaitVisible(chromedp.CSS(`p.error`)))
		require.Contains(t, b.text(`p.error`), "unknown token")
		require.Zero(t, b.eval(`document.querySelectorAll("#who").length`), "no one is logged in")
		b.submit(chromedp.SendKeys(chromedp.ID("token"), e.dev.creds["CAIRN_VIEWER_TOKEN"]), chromedp.Click(chromedp.ID("login")))
		b.do(chromedp.WaitVisible(chromedp.ID("runs")))
		require.Contains(t, b.text("#who"), "(viewer)")
		require.Equal(t, "tagged", b.value(`#filters select[name=workflow]`), "back on the page asked for")

		// The one-click link `cairn dev` prints logs in as operator (its fragment
		// never reaches the server); logging out ends the session.
		op := e.tab(t)
		op.do(chromedp.Navigate(e.loginLink), chromedp.WaitVisible(chromedp.ID("runs")))
		require.Contains(t, op.text("#who"), "(operator)")
		require.NotContains(t, op.location(), "token=")
		op.submit(chromedp.Click(chromedp.CSS(`header form button`)))
		op.do(chromedp.WaitVisible(chromedp.ID("token")))
		op.do(chromedp.Navigate(e.server+"/ui/runs"), chromedp.WaitVisible(chromedp.ID("token")))
	})

	t.Run("runs_filtered", func(t *testing.T) {
		a1 := e.startRun(t, "tagged", "-l", "team=a", "--wait")
		a2 := e.startRun(t, "tagged", "-l", "team=a", "--wait")
		bRun := e.startRun(t, "tagged", "-l", "team=b", "--wait")
		broken := e.startRun(t, "broken")
		b := e.operator(t)

		// Workflow chosen and label typed into the filter form: only team a's runs of tagged.
		b.do(chromedp.Navigate(e.server+"/ui/runs"), chromedp.WaitVisible(chromedp.ID("filters")))
		b.submit(
			chromedp.SetValue(chromedp.CSS(`#filters select[name=workflow]`), "tagged"),
			chromedp.SendKeys(chromedp.CSS(`#filters input[name=label]`), "team=a"),
			chromedp.Click(chromedp.CSS(`#filters button[type=submit]`)),
		)
		b.do(chromedp.WaitVisible(chromedp.ID("runs")))
		require.ElementsMatch(t, []string{a1, a2}, b.listedRuns())
		require.NotContains(t, b.listedRuns(), bRun)
		// The URL holds the filter: opened again (shared), it shows the same runs.
		shared := b.location()
		require.Contains(t, shared, "workflow=tagged")
		require.Contains(t, shared, "label=team%3Da")
		other := e.operator(t)
		other.do(chromedp.Navigate(shared), chromedp.WaitVisible(chromedp.ID("runs")))
		require.ElementsMatch(t, []string{a1, a2}, other.listedRuns())

		// By status: the failed run is listed once it has failed, and only failed runs.
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+broken), b.poll(`document.getElementById('run-status').textContent === 'failed'`))
		b.do(chromedp.Navigate(e.server+"/ui/runs"), chromedp.WaitVisible(chromedp.ID("filters")))
		b.submit(
			chromedp.SetValue(chromedp.CSS(`#filters select[name=status]`), "failed"),
			chromedp.Click(chromedp.CSS(`#filters button[type=submit]`)),
		)
		b.do(chromedp.WaitVisible(chromedp.ID("runs")))
		require.Contains(t, b.location(), "status=failed")
		require.Contains(t, b.listedRuns(), broken)
		require.NotContains(t, b.listedRuns(), a1)
		require.Equal(t, 0, b.eval(`Array.from(document.querySelectorAll('#runs tbody tr[data-run] .st')).filter(s => s.textContent !== 'failed').length`),
			"every listed run failed")
	})

	t.Run("live_dag", func(t *testing.T) {
		b := e.operator(t)
		// Start a run from its workflow's page. Its first step waits on the test's
		// gate, so the page is seen with the step running and the next one waiting.
		b.do(chromedp.Navigate(e.server+"/ui/workflows/gated"), chromedp.WaitVisible(chromedp.ID("start-run")))
		b.submit(chromedp.Click(chromedp.ID("start-run")))
		b.do(
			chromedp.WaitVisible(chromedp.ID("dag")),
			b.poll(`document.querySelector('#dag .node[data-key=first]').getAttribute('data-status') === 'running'`),
			// The live page redraws the header as events come: read it once it holds
			// the run's state (CI read it empty, between two redraws).
			b.poll(`(document.getElementById('run-status') || {}).textContent === 'running'`),
		)
		require.NotEqual(t, "succeeded", b.attr(`#dag .node[data-key=second]`, "data-status"))
		// The running step's panel shows its log live, before the step ends.
		b.do(b.openNode("first", `(document.querySelector('#log-live') || {}).textContent?.includes('waiting for the gate')`))
		// A mark on the page: a reload would wipe it.
		b.do(chromedp.Evaluate[chromedp.Void](`window.cairnMark = 1`))
		e.gate.open()
		start := time.Now()
		b.do(b.poll(`document.querySelector('#dag .node[data-key=first]').getAttribute('data-status') === 'succeeded'`))
		b.do(b.poll(`document.querySelectorAll('#dag .node.st-succeeded').length === 2 && document.getElementById('run-status').textContent === 'succeeded'`))
		t.Logf("the page showed the run succeeded %s after the gate opened", time.Since(start).Round(time.Millisecond))
		require.Equal(t, 1, b.eval(`window.cairnMark === 1 ? 1 : 0`), "the page turned green without a reload")
		require.Contains(t, b.text("#progress"), "0 left")
	})

	t.Run("cancel", func(t *testing.T) {
		held := e.startRun(t, "held")
		b := e.operator(t)
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+held),
			b.poll(`document.getElementById('run-status').textContent === 'running'`),
			chromedp.WaitVisible(chromedp.ID("cancel")))
		// Cancel asks first; the user says yes.
		dialog := b.acceptDialogs()
		b.submit(chromedp.Click(chromedp.ID("cancel")))
		select {
		case msg := <-dialog:
			require.Equal(t, "Cancel this run?", msg)
		case <-time.After(5 * time.Second): // it opened before the click returned, if at all
			t.Fatal("Cancel did not ask first")
		}
		b.do(b.poll(`document.getElementById('run-status').textContent === 'canceled'`))
		require.Equal(t, "canceled", e.runStatus(t, held), "the API says so too")
		b.do(b.poll(`document.getElementById('retry') && !document.getElementById('retry').hidden && document.getElementById('cancel').hidden`))
	})

	t.Run("retry", func(t *testing.T) {
		// A failed step: its panel shows the log; Retry runs it again to success.
		b := e.operator(t)
		b.do(chromedp.Navigate(e.server+"/ui/workflows/flaky"), chromedp.WaitVisible(chromedp.ID("start-run")))
		b.submit(chromedp.Click(chromedp.ID("start-run")))
		b.do(
			chromedp.WaitVisible(chromedp.ID("dag")),
			b.poll(`document.getElementById('run-status').textContent === 'failed'`),
			b.openNode("flaky", visible("log")),
		)
		require.Contains(t, b.text("#log"), "attempt 1 fails on purpose")
		id := b.attr("#run", "data-run")
		b.submit(chromedp.Click(chromedp.ID("step-retry")))
		b.do(b.poll(`document.getElementById('run-status').textContent === 'succeeded'`))
		require.Equal(t, "succeeded", e.runStatus(t, id))
		require.Contains(t, b.location(), "step=flaky", "back on the step's panel")
	})

	t.Run("csrf_and_origin", func(t *testing.T) {
		held := e.startRun(t, "held")
		b := e.operator(t)
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+held),
			b.poll(`document.getElementById('run-status').textContent === 'running'`))
		csrf := b.attr(`meta[name=csrf-token]`, "content")
		// From the UI's own page, but without the CSRF token or with a wrong one.
		post := func(headers string) int {
			return b.eval(`fetch('/ui/runs/` + held + `/cancel', {method: 'POST', headers: ` + headers + `}).then(r => r.status)`)
		}
		require.Equal(t, http.StatusForbidden, post(`{}`), "no CSRF token")
		require.Equal(t, http.StatusForbidden, post(`{'X-CSRF-Token': 'forged'}`), "a wrong CSRF token")

		// From another origin (same host, another port: the SameSite=Strict cookie
		// still goes along), a form that even carries the right token.
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_ = evilPage.Execute(w, map[string]string{"Action": e.server + "/ui/runs/" + held + "/cancel", "CSRF": csrf})
		}))
		t.Cleanup(evil.Close)
		b.do(chromedp.Navigate(evil.URL), chromedp.WaitVisible(chromedp.ID("evil")))
		status := b.submit(chromedp.Click(chromedp.ID("evil")))
		require.Equal(t, http.StatusForbidden, status)
		require.Contains(t, b.text("body"), "cross-origin request refused")

		// The run goes on, as its page and the API say.
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+held), chromedp.WaitVisible(chromedp.ID("run-status")))
		require.Equal(t, "running", b.text("#run-status"))
		require.Equal(t, "running", e.runStatus(t, held))
		// With the token, from the page, the same request works.
		require.Equal(t, http.StatusOK, post(`{'X-CSRF-Token': '`+csrf+`'}`))
		require.Eventually(t, func() bool { return e.runStatus(t, held) == "canceled" }, 20*time.Second, 50*time.Millisecond,
			"waiting for the run to be canceled")
	})

	t.Run("viewer", func(t *testing.T) {
		// A viewer sees no write button; a forged POST (right CSRF token, same
		// origin) is refused by the API; the cookie alone does not open the API.
		run := e.startRun(t, "tagged", "--wait")
		b := e.login(t, e.dev.creds["CAIRN_VIEWER_TOKEN"])
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+run+"?step=echo"), chromedp.WaitVisible(chromedp.ID("step")))
		require.Contains(t, b.text("#who"), "(viewer)")
		require.Zero(t, b.eval(`document.querySelectorAll('main button, main form[method=post]').length`), "a viewer sees no write button")
		require.Equal(t, http.StatusForbidden, b.eval(`fetch('/ui/runs/`+run+`/retry', {method: 'POST', headers: {'X-CSRF-Token': document.querySelector('meta[name=csrf-token]').content}}).then(r => r.status)`),
			"the API refuses a viewer's forged POST")
		b.do(chromedp.Navigate(e.server+"/ui/workflows/tagged"), chromedp.WaitVisible(chromedp.ID("definition")))
		require.Zero(t, b.eval(`document.querySelectorAll('main button').length`))
		require.Equal(t, http.StatusUnauthorized, b.eval(`fetch('/v1/runs/`+run+`/cancel', {method: 'POST'}).then(r => r.status)`),
			"the session cookie is no API credential")
	})

	t.Run("screenshots", func(t *testing.T) {
		// examples/fanout's run page and the runs list, as screenshots; a run of
		// 1,000 steps renders (its time is printed, not asserted).
		b := e.operator(t)
		fanout := e.startRun(t, "fanout")
		b.do(
			chromedp.Navigate(e.server+"/ui/runs/"+fanout+"?step=join"),
			b.poll(`document.getElementById('run-status').textContent === 'succeeded'`),
			chromedp.WaitVisible(chromedp.ID("output")),
		)
		b.shoot("run-fanout.png")

		// A map step is one node with its progress.
		mapped := e.startRun(t, "mapped")
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+mapped),
			b.poll(`document.getElementById('run-status').textContent === 'succeeded'`),
			b.poll(`(document.querySelector('#dag .node[data-key=each] text.map') || {}).textContent === '5/5 ✓'`))
		require.Equal(t, 2, b.eval(`document.querySelectorAll('#dag .node').length`), "the map's instances are not nodes of their own")
		b.do(chromedp.Navigate(e.server+"/ui/runs"), chromedp.WaitVisible(chromedp.ID("runs")))
		b.shoot("runs.png")

		big := e.startRun(t, "big")
		start := time.Now()
		b.do(chromedp.Navigate(e.server+"/ui/runs/"+big), b.poll(`document.querySelectorAll('#dag .node').length === 1000`))
		t.Logf("the run page of 1,000 steps rendered in %s (the server built it in %s)", time.Since(start).Round(time.Millisecond), b.attr("#run", "data-elapsed"))
	})
}

// evilPage is another site's page: a form that posts to the UI.
var evilPage = template.Must(template.New("evil").Parse(`<!doctype html><title>win a prize</title>
<form method="post" action="{{.Action}}"><input type="hidden" name="csrf" value="{{.CSRF}}"><button id="evil">Claim</button></form>`))

// browserEnv is what the browser subtests share: a `cairn dev` with the test's
// workflows deployed, and a running headless Chromium.
type browserEnv struct {
	dev       *devProcess
	server    string          // the server's base URL
	loginLink string          // the one-click login link `cairn dev` printed
	browser   context.Context // a chromedp context whose browser runs
	gate      *gate           // what the gated workflow's first step waits for
}

// setupBrowser starts `cairn dev` in a folder of its own, deploys the test's
// workflows and examples/fanout, and starts Chromium.
func setupBrowser(t *testing.T) *browserEnv {
	t.Helper()
	chromium := chromiumPath(t)
	g := newGate(t)
	// PostgreSQL runs as an unprivileged account when we are root: the folder must
	// be reachable by it, which t.TempDir() (mode 0700) is not.
	dir, err := os.MkdirTemp("", "cairn-ui-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	writeUIBundles(t, dir, g.port())
	p, _ := startDev(t, dir)
	login := regexp.MustCompile(`log in as operator: (\S+)`).FindStringSubmatch(p.stdout.String())
	require.Len(t, login, 2, "cairn dev prints a one-click login link:\n%s", p.stdout.String())
	e := &browserEnv{dev: p, server: p.creds["CAIRN_SERVER"], loginLink: login[1], gate: g}
	for _, b := range []string{"gated", "held", "flaky", "tagged", "broken", "big", "mapped"} {
		p.deploy(t, filepath.Join(dir, b))
	}
	p.deploy(t, "../../examples/fanout")
	e.browser = startChromium(t, chromium)
	return e
}

// startChromium starts headless Chromium for the test; the chromedp context it
// returns runs it.
func startChromium(t *testing.T, chromium string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.DisableGPU, chromedp.WindowSize(1400, 900))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses to run as root
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(cancelBrowser)
	start := time.Now()
	require.NoError(t, chromedp.Do(browser)) // starts the browser, on a context without a timeout
	t.Logf("chromium started in %s", time.Since(start).Round(time.Millisecond))
	return browser
}

// chromiumPath finds Debian's chromium (`make tools` installs it). Without it the
// test is skipped, or fails when CI=true: nothing is skipped in CI.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on PATH: `make tools` installs it (scripts/install-chromium.sh; Debian: apt-get install chromium)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// browserTab is one tab in a browser context of its own (its own cookies), bound
// to a subtest: every wait in it ends by the subtest's deadline.
type browserTab struct {
	t   *testing.T
	ctx context.Context
}

// tabTimeout bounds everything one subtest does in its tabs (a map of many items
// runs to its end in one).
const tabTimeout = 3 * time.Minute

// tab opens a tab in a new browser context, logged in as no one.
func (e *browserEnv) tab(t *testing.T) *browserTab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(e.browser, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	tctx, cancelTimeout := context.WithTimeout(ctx, tabTimeout)
	t.Cleanup(cancelTimeout)
	b := &browserTab{t: t, ctx: tctx}
	t.Cleanup(func() {
		if t.Failed() { // what the page showed (if the tab still answers)
			ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			s, err := chromedp.Run(ectx, chromedp.Evaluate[string](`document.location.href + "\n" + document.body.innerText`))
			if err == nil {
				t.Logf("the page when the test failed: %s", s)
			}
		}
	})
	return b
}

// login opens a tab logged in with token through the login form.
func (e *browserEnv) login(t *testing.T, token string) *browserTab {
	t.Helper()
	b := e.tab(t)
	b.do(chromedp.Navigate(e.server+"/ui/login"), chromedp.WaitVisible(chromedp.ID("token")))
	b.submit(chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Click(chromedp.ID("login")))
	b.do(chromedp.WaitVisible(chromedp.ID("who")))
	return b
}

// operator opens a tab logged in as operator.
func (e *browserEnv) operator(t *testing.T) *browserTab {
	t.Helper()
	return e.login(t, e.dev.creds["CAIRN_OPERATOR_TOKEN"])
}

// staleNode reports whether err is Chromium saying that a node chromedp had
// found is gone: a live page (a run's DAG, its step panel) re-renders between
// chromedp finding an element and acting on it, most often on a loaded machine.
// The action found nothing wrong with the page, so it is tried again.
func staleNode(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "Could not find node with given id") ||
		strings.Contains(msg, "No node with given id found") ||
		strings.Contains(msg, "Node is detached from document")
}

// untilFresh runs f again while it fails on a node the page replaced (staleNode),
// at most five times.
func untilFresh[T any](f func() (T, error)) (T, error) {
	for i := 1; ; i++ {
		v, err := f()
		if !staleNode(err) || i == 5 {
			return v, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// do runs actions in the tab, one after the other, and fails the test on an
// error.
func (b *browserTab) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	for _, a := range actions {
		_, err := untilFresh(func() (struct{}, error) { return struct{}{}, chromedp.Do(b.ctx, a) })
		require.NoError(b.t, err)
	}
}

// submit runs actions that end in a navigation (a form's POST and the redirect
// after it, or a select that submits its form on change), waits for the new
// page to load and returns its HTTP status. They run together, inside the wait
// for the navigation, since any of them may start it; again when Chromium says
// a node they acted on was replaced (staleNode).
func (b *browserTab) submit(actions ...chromedp.Action[chromedp.Void]) int {
	b.t.Helper()
	resp, err := untilFresh(func() (*network.Response, error) {
		return chromedp.RunResponse(b.ctx, actions...)
	})
	require.NoError(b.t, err)
	require.NotNil(b.t, resp, "the actions loaded no page")
	return int(resp.Status)
}

// openNode clicks the DAG's node of step key until cond (JavaScript) holds on
// the page: the click opens its panel. A live page moves and redraws its graph
// (a failed run's error appears above it), so the click is the page's own
// (dispatched on the node where it is then, not at the coordinates chromedp
// read a moment before), and is tried again every two seconds while cond does
// not hold (a click that landed during a redraw opens nothing).
func (b *browserTab) openNode(key, cond string) chromedp.Action[chromedp.Void] {
	return b.poll(`(() => {
  if (` + cond + `) return true;
  const now = Date.now();
  if (!window.cairnClickedAt || now - window.cairnClickedAt > 2000) {
    const n = document.querySelector('#dag .node[data-key="` + key + `"]');
    if (n) { n.dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true})); window.cairnClickedAt = now; }
  }
  return false;
})()`)
}

// visible is the JavaScript condition that the element with id is shown.
func visible(id string) string {
	return `(document.getElementById('` + id + `') || {}).offsetParent != null`
}

// poll waits until a JavaScript condition holds on the current page (a minute:
// what it waits for comes within a second or two, but CI's machine can be loaded
// many times over its cores).
func (b *browserTab) poll(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(time.Minute), chromedp.WithPollingInterval(50*time.Millisecond))
}

// text is the text of sel's first element. An empty text is read again for up
// to 3 s: the live pages redraw their parts as events come (the run's header,
// its status), and a read between two redraws found them empty (CI, twice). No
// test expects an element without text here (texts lists them).
func (b *browserTab) text(sel string) string {
	b.t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		s, err := untilFresh(func() (string, error) { return chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel))) })
		require.NoError(b.t, err, sel)
		if s = strings.TrimSpace(s); s != "" || time.Now().After(deadline) {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *browserTab) value(sel string) string {
	b.t.Helper()
	s, err := untilFresh(func() (string, error) { return chromedp.Run(b.ctx, chromedp.Value(chromedp.CSS(sel))) })
	require.NoError(b.t, err, sel)
	return s
}

func (b *browserTab) attr(sel, name string) string {
	b.t.Helper()
	a, err := untilFresh(func() (chromedp.AttributeResult, error) {
		return chromedp.Run(b.ctx, chromedp.AttributeValue(chromedp.CSS(sel), name))
	})
	require.NoError(b.t, err, sel)
	require.True(b.t, a.Exists, "%s has no %s", sel, name)
	return a.Value
}

func (b *browserTab) location() string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Location())
	require.NoError(b.t, err)
	return s
}

// eval evaluates a JavaScript expression whose value (or promise's) is an integer.
func (b *browserTab) eval(expr string) int {
	b.t.Helper()
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](expr, chromedp.EvalAwaitPromise))
	require.NoError(b.t, err, expr)
	return n
}

// listedRuns returns the IDs of the runs the runs list shows.
func (b *browserTab) listedRuns() []string {
	b.t.Helper()
	ids, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#runs tbody tr[data-run]')).map(r => r.dataset.run)`))
	require.NoError(b.t, err)
	return ids
}

// acceptDialogs says yes to every dialog the page opens (confirm) and sends
// each one's message on the channel returned.
func (b *browserTab) acceptDialogs() <-chan string {
	msgs := make(chan string, 8)
	dialogs := chromedp.Events(b.ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(b.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			select {
			case msgs <- ev.Message:
			default:
			}
		}
	}()
	return msgs
}

// shoot saves screenshots of the whole page in the subtest's artifact folder:
// name as the page looks in light mode, and name with -dark before its
// extension as it looks when the system prefers dark (the UI follows it).
func (b *browserTab) shoot(name string) {
	b.t.Helper()
	for _, scheme := range []string{"light", "dark"} {
		b.withScheme(scheme, func() {
			// A screenshot is an artifact, not an assertion: one that Chromium does
			// not take within a minute (seen once on a machine loaded ~20 times over
			// its cores) is logged, not failed.
			ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
			defer cancel()
			shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: a PNG
			if err != nil {
				b.t.Logf("no screenshot %s (%s): %v", name, scheme, err)
				return
			}
			file := name
			if scheme == "dark" {
				file = strings.TrimSuffix(name, ".png") + "-dark.png"
			}
			path := filepath.Join(b.t.ArtifactDir(), file)
			require.NoError(b.t, os.WriteFile(path, shot, 0o644))
			b.t.Logf("screenshot: %s", path)
		})
	}
}

// withScheme runs f with the page rendered as when the system prefers scheme
// (light or dark), then as the system says again.
func (b *browserTab) withScheme(scheme string, f func()) {
	b.t.Helper()
	_, err := chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
	require.NoError(b.t, err)
	defer func() {
		_, err := chromedp.Call(b.ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{})
		require.NoError(b.t, err)
	}()
	f()
}

// startRun starts a run of workflow through the CLI (with its extra flags) and
// returns its ID.
func (e *browserEnv) startRun(t *testing.T, workflow string, flags ...string) string {
	t.Helper()
	out := e.cli(t, append([]string{"run", "start", workflow}, flags...)...)
	id := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
	require.Regexp(t, `^[0-9a-f-]{36}$`, id, "cairn run start prints the run's ID first:\n%s", out)
	return id
}

// runStatus returns a run's status as the API (through the CLI) tells it.
func (e *browserEnv) runStatus(t *testing.T, id string) string {
	t.Helper()
	// run get exits non-zero for a run that failed or was canceled: the status it
	// printed is what counts.
	out, _ := e.cliResult("run", "get", id)
	m := regexp.MustCompile(`(?m)^status\s+(\S+)`).FindStringSubmatch(out)
	require.Len(t, m, 2, "cairn run get prints the status:\n%s", out)
	return m[1]
}

// cli runs the cairn CLI against the dev server and returns what it printed.
func (e *browserEnv) cli(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.cliResult(args...)
	require.NoError(t, err, "cairn %s", strings.Join(args, " "))
	return out
}

// cliResult runs the cairn CLI against the dev server and returns what it printed
// and its error (with what it printed on stderr).
func (e *browserEnv) cliResult(args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	getenv := func(k string) string { return e.dev.creds[k] }
	if err := run(context.Background(), args, getenv, &stdout, &stderr); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, stderr.String())
	}
	return stdout.String(), nil
}

// deploy deploys the bundle folder dir through the CLI.
func (p *devProcess) deploy(t *testing.T, dir string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	getenv := func(k string) string { return p.creds[k] }
	err := run(context.Background(), []string{"deploy", dir}, getenv, &stdout, &stderr)
	require.NoError(t, err, "%s", stderr.String())
}

// gate is a TCP port on loopback that a step's handler reads a line from: the
// read blocks until the test opens the gate. It lets the test see a step running
// for as long as it needs to, with no timing involved.
type gate struct {
	ln       net.Listener
	released chan struct{}
	once     sync.Once
}

func newGate(t *testing.T) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := &gate{ln: ln, released: make(chan struct{})}
	t.Cleanup(func() { g.open(); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				<-g.released
				_, _ = c.Write([]byte("go\n"))
			}()
		}
	}()
	return g
}

func (g *gate) port() int { return g.ln.Addr().(*net.TCPAddr).Port }

// open lets every handler waiting at the gate, and every later one, go on.
func (g *gate) open() { g.once.Do(func() { close(g.released) }) }

// writeUIBundles writes the workflows the browser test deploys:
//   - gated: first waits at the gate on gatePort (an exec handler: bash reads a line
//     from /dev/tcp), then second;
//   - held: one step that sleeps for ten minutes (to be canceled);
//   - flaky: fails its first attempt with a log line, one attempt allowed;
//   - tagged: one echo step; broken: one step that fails for good;
//   - big: 1,000 steps (one, 998 beside each other, one).
func writeUIBundles(t *testing.T, dir string, gatePort int) {
	t.Helper()
	write := func(path, body string, mode os.FileMode) {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(body), mode))
	}
	// The gate is a port of the host: a sandboxed handler reaches it only when
	// its step allows it (network: allow).
	write(filepath.Join(dir, "gated", "cairn.yaml"), fmt.Sprintf(`name: gated
steps:
  - {key: first, exec: ["./first"], network: {allow: ["127.0.0.1:%d"]}}
  - {key: second, needs: [first], builtin: echo, with: {value: {done: true}}}
`, gatePort), 0o644)
	write(filepath.Join(dir, "gated", "first"), fmt.Sprintf(`#!/bin/bash
cat >/dev/null
echo "first: waiting for the gate" >&2
read -r word </dev/tcp/127.0.0.1/%d
echo "{\"gate\": \"$word\"}"
`, gatePort), 0o755)
	write(filepath.Join(dir, "held", "cairn.yaml"), `name: held
steps:
  - {key: hold, builtin: sleep, with: {duration: 10m}, timeout: 15m}
`, 0o644)
	write(filepath.Join(dir, "flaky", "cairn.yaml"), `name: flaky
steps:
  - key: flaky
    exec: ["./flaky"]
    retry: {max_attempts: 1}
  - {key: after, needs: [flaky], builtin: echo, with: {value: {ok: true}}}
`, 0o644)
	write(filepath.Join(dir, "flaky", "flaky"), `#!/bin/sh
cat >/dev/null
if [ "$CAIRN_ATTEMPT" = 1 ]; then echo "flaky: attempt 1 fails on purpose" >&2; exit 1; fi
echo "flaky: attempt $CAIRN_ATTEMPT" >&2
echo '{"ok": true}'
`, 0o755)
	write(filepath.Join(dir, "mapped", "cairn.yaml"), `name: mapped
steps:
  - {key: split, builtin: echo, with: {value: {items: [1, 2, 3, 4, 5]}}}
  - {key: each, needs: [split], map: {over: "deps.split.items"}, builtin: echo, with: {value: {ok: true}}}
`, 0o644)
	write(filepath.Join(dir, "tagged", "cairn.yaml"), `name: tagged
steps:
  - {key: echo, builtin: echo, with: {value: {ok: true}}}
`, 0o644)
	write(filepath.Join(dir, "broken", "cairn.yaml"), `name: broken
steps:
  - key: broken
    builtin: fail
    with: {retryable: false, message: broken on purpose}
    retry: {max_attempts: 1}
`, 0o644)
	var b bytes.Buffer
	b.WriteString("name: big\nsteps:\n  - {key: s0000, builtin: echo, with: {value: 0}}\n")
	for i := 1; i < 999; i++ {
		fmt.Fprintf(&b, "  - {key: s%04d, needs: [s0000], builtin: echo, with: {value: %d}}\n", i, i)
	}
	b.WriteString("  - key: s0999\n    needs: [")
	for i := 1; i < 999; i++ {
		if i > 1 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "s%04d", i)
	}
	b.WriteString("]\n    builtin: echo\n    with: {value: 999}\n")
	write(filepath.Join(dir, "big", "cairn.yaml"), b.String(), 0o644)
}
