package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCLIEvents: an order workflow started by order.created, waiting for the
// payment of its order and canceled by order.cancelled of its order, through the
// CLI and a real dispatcher: each path end to end, the payment sent after the wait
// began and before it (buffered).
func TestCLIEvents(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte(`name: orders
triggers:
  - {event: order.created, input: "event.data"}
cancel_on:
  - {event: order.cancelled, match: "event.data.order_id == input.order_id"}
steps:
  - key: pay
    wait_for_event: {event: payment.succeeded, match: "event.data.order_id == input.order_id", timeout: 1h}
  - {key: ship, needs: [pay], builtin: echo}
`), 0o644))
	b.mustCLI(t, "deploy", dir)
	started := regexp.MustCompile(`(?m)^started  run (\S+) \(orders version 1, triggers\[0\]\)$`)
	start := func(order string) string {
		out := b.mustCLI(t, "event", "send", "order.created", "--data", `{"order_id": "`+order+`"}`)
		m := started.FindStringSubmatch(out)
		require.NotNil(t, m, out)
		return m[1]
	}
	status := func(id string) func() string {
		return func() string { out, _ := b.cli(t, "run", "get", id); return out }
	}

	// Paid after the step began to wait.
	o1 := start("o1")
	require.Eventually(t, func() bool {
		return regexp.MustCompile(`(?m)^pay +suspended .*event payment.succeeded`).MatchString(status(o1)())
	}, 20*time.Second, 20*time.Millisecond, "the pay step waits for its event")
	out := b.mustCLI(t, "event", "send", "payment.succeeded", "--id", "pay-o1", "--data", `{"order_id": "o1"}`)
	require.Contains(t, out, "resumed  run "+o1+" step pay")
	require.Contains(t, b.mustCLI(t, "event", "send", "payment.succeeded", "--id", "pay-o1", "--data", `{"order_id": "o1"}`),
		"received before")
	require.Eventually(t, func() bool { return strings.Contains(status(o1)(), "succeeded") }, 20*time.Second, 20*time.Millisecond)

	// Paid at once: the step takes the buffered payment, or the payment finds it waiting.
	o2 := start("o2")
	b.mustCLI(t, "event", "send", "payment.succeeded", "--data", `{"order_id": "o2"}`)
	require.Eventually(t, func() bool {
		return regexp.MustCompile(`(?m)^status +succeeded`).MatchString(status(o2)())
	}, 20*time.Second, 20*time.Millisecond, "%s", status(o2)())

	// Canceled by its order's cancellation, not another's.
	o3 := start("o3")
	o4 := start("o4")
	out = b.mustCLI(t, "event", "send", "order.cancelled", "--data", `{"order_id": "o3"}`)
	require.Contains(t, out, "canceled run "+o3)
	require.NotContains(t, out, o4)
	require.Regexp(t, `(?m)^status +canceled`, status(o3)())

	list := b.mustCLI(t, "event", "list", "--name", "payment.succeeded")
	require.Contains(t, list, "pay-o1")
	require.Contains(t, b.mustCLI(t, "event", "get", "pay-o1"), `{"order_id":"o1"}`)
	_, err := b.cli(t, "event", "get", "nope")
	require.Error(t, err)

	// What flow control did is said too: a singleton's second event is skipped,
	// naming the key's run.
	single := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(single, "cairn.yaml"), []byte(`name: sync
triggers:
  - {event: doc.changed, singleton: {key: "event.data.doc", mode: skip}}
steps:
  - {key: hold, builtin: sleep, with: {duration: 1h}}
`), 0o644))
	b.mustCLI(t, "deploy", single)
	first := b.mustCLI(t, "event", "send", "doc.changed", "--data", `{"doc": "d1"}`)
	m := regexp.MustCompile(`(?m)^started  run (\S+) \(sync version 1, triggers\[0\]\)$`).FindStringSubmatch(first)
	require.NotNil(t, m, first)
	t.Cleanup(func() { _, _ = b.cli(t, "run", "cancel", m[1]) })
	out = b.mustCLI(t, "event", "send", "doc.changed", "--id", "d1-again", "--data", `{"doc": "d1"}`)
	require.Contains(t, out, `skipped  sync version 1, triggers[0] (singleton key "d1"): run `+m[1])
	require.Contains(t, b.mustCLI(t, "event", "get", "d1-again"), "skipped  sync")
}
