package scenario

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cairnrun/cairn/bench/internal/cairn"
	"github.com/cairnrun/cairn/bench/internal/report"
)

// The events scenario's workflows and events.
const (
	// eventTriggers is how many workflows have a trigger on eventTick: each tick
	// starts that many runs.
	eventTriggers = 10
	eventTick     = "bench.tick"
	// workflowOrder is started by eventOrder (its data is the run's input) and
	// waits for the eventPaid of its order_id, then runs a noop step.
	workflowOrder = "bench-ev-order"
	eventOrder    = "bench.order"
	eventPaid     = "bench.paid"
	// eventClients is how many clients send events at once.
	eventClients = 4
)

func tickBundle(i int) map[string]cairn.File {
	y := fmt.Sprintf("name: bench-ev-t%02d\ndescription: started by every %s\ntriggers:\n  - {event: %s}\nsteps:\n  - {key: only, builtin: noop}\n",
		i, eventTick, eventTick)
	return map[string]cairn.File{"cairn.yaml": {Body: []byte(y)}}
}

func orderBundle() map[string]cairn.File {
	y := "name: " + workflowOrder + "\ndescription: waits for the payment of its order\ntriggers:\n  - {event: " + eventOrder + ", input: \"event.data\"}\n" +
		"steps:\n  - key: pay\n    wait_for_event: {event: " + eventPaid + ", match: \"event.data.order_id == input.order_id\"}\n" +
		"  - {key: after, needs: [pay], builtin: noop}\n"
	return map[string]cairn.File{"cairn.yaml": {Body: []byte(y)}}
}

// Events measures POST /v1/events: events whose name 10 workflows' triggers
// match (each starts 10 runs), then events each of which completes the wait of
// one of EventWaits runs waiting on distinct keys (order_id), with the time from
// the event to the step after the wait.
func Events(ctx context.Context, e *Env) *report.Result {
	r := e.NewResult("events")
	r.Settings["triggers"] = fmt.Sprintf("%d events %s, each matching a trigger of %d workflows (one noop step each): %d runs started per event; API-only server, %d clients",
		e.Scale.EventsSent, eventTick, eventTriggers, eventTriggers, eventClients)
	r.Settings["waits"] = fmt.Sprintf("%d runs of %s (started by %d %s events) wait for %s with match event.data.order_id == input.order_id, each on its own order_id; then %d %s events of distinct orders, in random order, from %d clients, with one `cairn serve` (dispatcher) running the step after the wait",
		e.Scale.EventWaits, workflowOrder, e.Scale.EventWaits, eventOrder, eventPaid, e.Scale.EventsSent, eventPaid, eventClients)
	r.Settings["measured"] = "events/s = events / wall time of the sends; ingest = POST latency at the client (p50, p99); event_to_next_step = the `after` step's finished_at − the event's received_at (the wait completes in the event's transaction; the step after it needs a dispatcher's claim)"
	err := events(ctx, e, r)
	r.Finish(err)
	return r
}

// resetEvents empties the run tables and the received events.
func (e *Env) resetEvents(ctx context.Context) error {
	if _, err := e.DB.Exec(ctx, `TRUNCATE received_events CASCADE`); err != nil {
		return fmt.Errorf("reset events: %w", err)
	}
	return e.ResetCatalog(ctx)
}

func events(ctx context.Context, e *Env, r *report.Result) error {
	n, waits := e.Scale.EventsSent, e.Scale.EventWaits
	for i := range eventTriggers {
		if _, err := e.Client.Deploy(ctx, tickBundle(i)); err != nil {
			return err
		}
	}
	if _, err := e.Client.Deploy(ctx, orderBundle()); err != nil {
		return err
	}
	if err := e.resetEvents(ctx); err != nil {
		return err
	}
	defer func() { _ = e.resetEvents(context.WithoutCancel(ctx)) }()

	// Triggers: each tick starts eventTriggers runs.
	e.Logf("events: %d events matching %d triggers each", n, eventTriggers)
	lat, wall, err := hammer(ctx, eventClients, n, func(i int) error {
		a, err := e.Client.SendEvent(ctx, eventTick, []byte(fmt.Sprintf(`{"i": %d}`, i)))
		if err == nil && len(a.Started) != eventTriggers {
			err = fmt.Errorf("event %s started %d runs, not %d (errors %s)", a.EventID, len(a.Started), eventTriggers, a.Errors)
		}
		return err
	})
	if err != nil {
		return err
	}
	r.Set("trigger_events_per_s", float64(n)/wall.Seconds())
	r.Set("trigger_runs_started_per_s", float64(n*eventTriggers)/wall.Seconds())
	r.Set("trigger_ingest_p50_ms", report.Percentile(lat, 50))
	r.Set("trigger_ingest_p99_ms", report.Percentile(lat, 99))
	if err := e.resetEvents(ctx); err != nil {
		return err
	}

	// Waits: the orders' runs, started by events, suspend on one dispatcher.
	e.Logf("events: %d runs waiting on distinct keys", waits)
	if _, _, err := hammer(ctx, 16, waits, func(i int) error {
		_, err := e.Client.SendEvent(ctx, eventOrder, []byte(fmt.Sprintf(`{"order_id": "o-%d"}`, i)))
		return err
	}); err != nil {
		return err
	}
	servers, err := e.StartDispatchers(ctx, 1, nil)
	if err != nil {
		return err
	}
	defer StopAll(servers)
	start := time.Now()
	if err := e.pollCount(ctx, `SELECT count(*) FROM steps WHERE status = 'suspended' AND wait_kind = 'event'`, waits, 20*time.Minute); err != nil {
		return fmt.Errorf("waits suspending: %w", err)
	}
	r.Set("waits_suspend_s", time.Since(start).Seconds())
	if _, err := e.DB.Exec(ctx, `ANALYZE steps`); err != nil {
		return err
	}

	e.Logf("events: %d events, each completing one of %d waits", n, waits)
	orders := rand.Perm(waits)[:min(n, waits)]
	lat, wall, err = hammer(ctx, eventClients, len(orders), func(i int) error {
		a, err := e.Client.SendEvent(ctx, eventPaid, []byte(fmt.Sprintf(`{"order_id": "o-%d"}`, orders[i])))
		if err == nil && len(a.Resumed) != 1 {
			err = fmt.Errorf("event %s resumed %d waits, not 1 (errors %s)", a.EventID, len(a.Resumed), a.Errors)
		}
		return err
	})
	if err != nil {
		return err
	}
	r.Set("wait_events_per_s", float64(len(orders))/wall.Seconds())
	r.Set("wait_ingest_p50_ms", report.Percentile(lat, 50))
	r.Set("wait_ingest_p99_ms", report.Percentile(lat, 99))
	if err := e.pollCount(ctx, `SELECT count(*) FROM steps WHERE key = 'after' AND status = 'succeeded'`, len(orders), 2*time.Minute); err != nil {
		return fmt.Errorf("steps after the waits: %w", err)
	}
	var p50, p99 float64
	err = e.DB.QueryRow(ctx, `
SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY d), 0), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY d), 0)
FROM (SELECT extract(epoch FROM a.finished_at - ev.received_at) * 1000 AS d
      FROM event_takes t JOIN received_events ev ON ev.seq = t.event_seq
      JOIN steps a ON a.run_id = t.run_id AND a.key = 'after') x`).Scan(&p50, &p99)
	if err != nil {
		return err
	}
	r.Set("event_to_next_step_p50_ms", p50)
	r.Set("event_to_next_step_p99_ms", p99)
	e.Logf("events: %.0f trigger events/s, %.0f wait events/s (ingest p50 %.1f ms, p99 %.1f ms with %d waiting)",
		r.Metrics["trigger_events_per_s"], r.Metrics["wait_events_per_s"], r.Metrics["wait_ingest_p50_ms"], r.Metrics["wait_ingest_p99_ms"], waits)
	return nil
}

// pollCount polls query (a count) until it reaches want, or timeout.
func (e *Env) pollCount(ctx context.Context, query string, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var got int
		if err := e.DB.QueryRow(ctx, query).Scan(&got); err != nil {
			return err
		}
		if got >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d after %s", got, want, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
