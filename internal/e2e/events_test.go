package e2e

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/cairnrun/cairn/client"
)

// envEventRaceRuns sets how many runs each case of TestEventWaitRace has (default
// 25; the full test is 1,000: CAIRN_E2E_EVENT_RACE_RUNS=1000).
const envEventRaceRuns = "CAIRN_E2E_EVENT_RACE_RUNS"

// TestEventWaitRace is the exactly-once of wait_for_event (docs/events.md, "Guarantees
// and how they are kept"), through the real binary on three servers sharing one
// catalog: runs wait for a payment event of their own order_id, and each one's event
// is sent to another server than the one that started it,
//   - before the wait began (the step sleeps first: the event is buffered),
//   - at once after the run was created (racing the step's beginning to wait), and
//   - after the step was suspended (the event resumes it).
//
// Every run succeeds (none stuck), its wait has one succeeded attempt whose output
// is its own event, and no event resumed another run or one twice.
func TestEventWaitRace(t *testing.T) {
	t.Parallel()
	n := envInt(t, envEventRaceRuns, 25)
	st := newStack(t, stackOptions{})
	servers := []*server{st.start(serverOptions{}), st.start(serverOptions{}), st.start(serverOptions{})}
	apis := make([]*apiClient, len(servers))
	for i, s := range servers {
		apis[i] = s.api()
	}
	const wait = `wait_for_event: {event: payment.succeeded, match: "event.data.order_id == input.order_id", timeout: 1h}`
	apis[0].deploy(map[string]string{"cairn.yaml": `name: slow
steps:
  - {key: pre, sleep: 2s}
  - {key: pay, needs: [pre], ` + wait + `}
`})
	apis[0].deploy(map[string]string{"cairn.yaml": `name: fast
steps:
  - {key: pay, ` + wait + `}
`})

	type order struct {
		key, run string
		answer   client.EventAnswer
	}
	cases := []struct {
		name, workflow string
		suspended      bool // send once pay is suspended
	}{{"before", "slow", false}, {"racing", "fast", false}, {"after", "fast", true}}
	var mu sync.Mutex
	orders := map[string][]*order{}
	var g errgroup.Group
	g.SetLimit(8)
	for _, c := range cases {
		for i := range n {
			o := &order{key: fmt.Sprintf("%s-%d", c.name, i)}
			orders[c.name] = append(orders[c.name], o)
			starter, sender := apis[i%len(apis)], apis[(i+1)%len(apis)]
			g.Go(func() error {
				id, err := starter.tryStartRun(c.workflow, 0, map[string]any{"order_id": o.key})
				if err != nil {
					return fmt.Errorf("start %s: %w", o.key, err)
				}
				for c.suspended {
					s, err := starter.step(id, "pay")
					if err != nil {
						return fmt.Errorf("step pay of %s: %w", o.key, err)
					}
					if s.Status == client.StepStatusSuspended {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				ctx, cancel := withTimeout(time.Minute)
				defer cancel()
				eid := "pay-" + o.key
				resp, err := sender.cl.SendEventWithResponse(ctx, client.EventBody{Name: "payment.succeeded", Id: &eid,
					Data: map[string]any{"order_id": o.key}})
				if err != nil {
					return fmt.Errorf("send %s: %w", eid, err)
				}
				if resp.JSON202 == nil {
					return fmt.Errorf("send %s: %d %s", eid, resp.StatusCode(), resp.Body)
				}
				mu.Lock()
				o.run, o.answer = id, *resp.JSON202
				mu.Unlock()
				return nil
			})
		}
	}
	require.NoError(t, g.Wait())

	for _, c := range cases {
		resumedAtOnce := 0
		for _, o := range orders[c.name] {
			// The event's answer resumed its own run, or nothing (buffered).
			switch res := *o.answer.Resumed; len(res) {
			case 0:
				require.False(t, c.suspended, "%s: its event found the suspended wait not waiting", o.key)
			case 1:
				require.Equal(t, client.EventResumed{RunId: o.run, Step: "pay"}, res[0], "%s: its event resumed", o.key)
				resumedAtOnce++
			default:
				t.Fatalf("%s: its event resumed %d waits: %v", o.key, len(res), res)
			}
		}
		t.Logf("%s: %d of %d waits resumed by their event's ingest, the others took it buffered", c.name, resumedAtOnce, n)
	}

	// Every run ends, each wait once, with its own event.
	g.SetLimit(8)
	for _, c := range cases {
		for i, o := range orders[c.name] {
			api := apis[(i+2)%len(apis)]
			g.Go(func() error {
				ctx, cancel := withTimeout(2 * time.Minute)
				defer cancel()
				rid, err := parseRunID(o.run)
				if err != nil {
					return err
				}
				run, err := api.cl.WaitRun(ctx, rid, client.WaitOptions{PollInterval: 100 * time.Millisecond})
				if err != nil {
					return fmt.Errorf("%s: run %s did not end (stuck?): %w", o.key, o.run, err)
				}
				if run.Status != client.RunStatusSucceeded {
					return fmt.Errorf("%s: run %s %s", o.key, o.run, run.Status)
				}
				as, err := api.attempts(o.run, "pay")
				if err != nil {
					return err
				}
				if statuses := attemptStatuses(as); len(statuses) != 1 || statuses[0] != "succeeded" {
					return fmt.Errorf("%s: the wait's attempts: %v, want one succeeded", o.key, statuses)
				}
				s, err := api.step(o.run, "pay")
				if err != nil {
					return err
				}
				var out struct {
					ID   string `json:"id"`
					Name string `json:"name"`
					Data struct {
						OrderID string `json:"order_id"`
					} `json:"data"`
				}
				if err := json.Unmarshal(jsonOf(s.Output), &out); err != nil || out.ID != "pay-"+o.key ||
					out.Name != "payment.succeeded" || out.Data.OrderID != o.key {
					return fmt.Errorf("%s: the wait's output %s (%v), want its event pay-%s", o.key, jsonOf(s.Output), err, o.key)
				}
				resumed := 0
				evs, err := api.tryEvents(o.run)
				if err != nil {
					return err
				}
				for _, e := range evs {
					if e.Type == "step.resumed" && deref(e.Step) == "pay" {
						resumed++
					}
				}
				if resumed != 1 {
					return fmt.Errorf("%s: %d step.resumed events of pay, want 1", o.key, resumed)
				}
				return nil
			})
		}
	}
	require.NoError(t, g.Wait())

	// The servers' metrics (docs/operations.md) count each wait once: completed by
	// its event's ingest (cairn_event_runs_total{effect="resumed"}) or by taking its
	// buffered event (cairn_event_waits_taken_total), summed over the servers.
	var received, resumed, taken float64
	for _, s := range servers {
		v, _ := s.metric("cairn_event_waits_taken_total")
		taken += v
		received += seriesOf(s, "cairn_events_received_total", `duplicate="false"`)
		resumed += seriesOf(s, "cairn_event_runs_total", `effect="resumed"`)
	}
	require.Equal(t, float64(len(cases)*n), received, "events received")
	require.Equal(t, float64(len(cases)*n), resumed+taken, "waits completed: %v at ingest, %v buffered", resumed, taken)
}

// seriesOf is the value of the series of metric whose labels hold label (0 with none).
func seriesOf(s *server, metric, label string) float64 {
	s.t.Helper()
	_, lines := s.metric(metric)
	for _, l := range lines {
		if strings.Contains(l, label) {
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			require.NoError(s.t, err, l)
			return v
		}
	}
	return 0
}
