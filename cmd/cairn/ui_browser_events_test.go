package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// eventSubtests drive the events page (docs/events.md, "In the UI") on
// TestUIActionsInBrowser's `cairn dev` and browser: an order started by an
// event, its step waiting for its payment (the step panel says the event and the
// match), the events list filtered by name, an event's page linking to the run
// it started and, once paid, to the step it resumed.
func eventSubtests(t *testing.T, e *browserEnv) {
	dir, err := os.MkdirTemp("", "cairn-ui-events-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := filepath.Join(dir, "shop")
	require.NoError(t, os.MkdirAll(d, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(d, "cairn.yaml"), []byte(`name: shop
triggers:
  - {event: shop.ordered, input: "event.data"}
steps:
  - key: pay
    wait_for_event: {event: shop.paid, match: "event.data.order_id == input.order_id"}
  - {key: ship, needs: [pay], builtin: echo, with: {value: shipped}}
`), 0o644))
	e.dev.deploy(t, d)

	t.Run("events_page", func(t *testing.T) {
		started := regexp.MustCompile(`started\s+run (\S+)`)
		out := e.cli(t, "event", "send", "shop.ordered", "--id", "order-7", "--data", `{"order_id": "o-7"}`)
		m := started.FindStringSubmatch(out)
		require.Len(t, m, 2, "cairn event send says the run it started:\n%s", out)
		run := m[1]
		e.cli(t, "event", "send", "shop.noted", "--data", `{"text": "nothing listens"}`)

		b := e.operator(t)
		// From the navigation, the events page lists both, newest first.
		b.do(chromedp.Navigate(e.server+"/ui/runs"), chromedp.WaitVisible(chromedp.ID("nav")))
		b.submit(chromedp.Click(chromedp.CSS(`#nav a[data-key=e]`)))
		b.do(chromedp.WaitVisible(chromedp.ID("events")))
		require.Equal(t, "shop.noted", b.attr(`#events tbody tr[data-event]`, "data-name"))
		require.Equal(t, run, b.attr(`#events tr[data-event=order-7] td.started a`, "href")[len("/ui/runs/"):])
		b.shoot("events.png")

		// Filtered by name: only the order.
		b.submit(chromedp.SendKeys(chromedp.ID("event-name"), "shop.ordered"), chromedp.Click(chromedp.ID("event-filter")))
		b.do(chromedp.WaitVisible(chromedp.ID("events")))
		require.Contains(t, b.location(), "name=shop.ordered")
		require.Equal(t, []string{"shop.ordered"}, b.attrs(`#events tbody tr[data-event]`, "data-name"))

		// The event's page: its data and the run it started, which waits for its
		// payment; the step panel says for which event and match.
		b.submit(chromedp.Click(chromedp.CSS(`#events tr[data-event=order-7] a.event-link`)))
		b.do(chromedp.WaitVisible(chromedp.ID("event-effects")))
		require.Equal(t, "order-7", b.text("#event-id"))
		require.Contains(t, b.text("#event-data"), `"order_id": "o-7"`)
		require.Equal(t, []string{"started"}, b.attrs(`#event-effects tr[data-effect]`, "data-effect"))
		b.submit(chromedp.Click(chromedp.CSS(`#event-effects tr[data-effect=started] a`)))
		b.do(chromedp.WaitVisible(chromedp.ID("dag")),
			b.poll(`document.querySelector('#dag .node[data-key=pay]').getAttribute('data-status') === 'suspended'`))
		require.Contains(t, b.text("#run-why"), "waiting: event shop.paid")
		b.do(b.openNode("pay", visible("waiting-for")))
		require.Contains(t, b.text("#waiting-for"), "waiting for event shop.paid")
		require.Equal(t, "event.data.order_id == input.order_id", b.text("#event-match"))

		// Paid: the payment's page links to the step it resumed.
		out = e.cli(t, "event", "send", "shop.paid", "--id", "pay-7", "--data", `{"order_id": "o-7"}`)
		require.Contains(t, out, fmt.Sprintf("resumed  run %s step pay", run))
		b.do(chromedp.Navigate(e.server+"/ui/events/pay-7"), chromedp.WaitVisible(chromedp.ID("event-effects")))
		require.Equal(t, "/ui/runs/"+run+"?step=pay", b.attr(`#event-effects tr[data-effect=resumed] a`, "href"))
		b.shoot("event.png")
	})
}
