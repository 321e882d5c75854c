package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

// newEventCmd is `cairn event`: send, list and get received events
// (docs/events.md).
func newEventCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	var name, since string
	cmd := listGroup{
		use: "event", alias: "events", short: "Send events, which start, resume and cancel runs, and list the events received",
		listUse: "list", listShort: "List received events, newest first (of --name, since --since)", args: cobra.NoArgs,
		list: func(c *cli, ctx context.Context, _ []string, limit int, out outputFormat) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			p := &client.ListReceivedEventsParams{Limit: pageSize(limit)}
			if name != "" {
				p.Name = &name
			}
			if since != "" {
				t, err := sinceTime(since)
				if err != nil {
					return err
				}
				p.Since = &t
			}
			return printList(c, cl.ReceivedEventPages(ctx, p), limit, out, func(r *client.ListReceivedEventsResponse) ([]client.ReceivedEvent, []byte) {
				return deref(r.JSON200.Items), r.Body
			}, "ID\tNAME\tRECEIVED\tSTARTED\tRESUMED\tCANCELED\tERRORS", func(ev client.ReceivedEvent) string {
				return fmt.Sprintf("%s\t%s\t%s\t%d\t%d\t%d\t%d", ev.EventId, ev.Name, formatTime(ev.ReceivedAt),
					len(deref(ev.Started)), len(deref(ev.Resumed)), len(deref(ev.Canceled)), len(deref(ev.Errors)))
			})
		},
		more: []func(c *cli) *cobra.Command{(*cli).newEventSendCmd, (*cli).newEventGetCmd},
	}.command(e, stdout, stderr)
	for _, sub := range cmd.Commands() {
		if sub.Name() == "list" {
			sub.Flags().StringVar(&name, "name", "", "only events of this name")
			sub.Flags().StringVar(&since, "since", "", "only events received since: a time (RFC 3339) or a duration ago (1h)")
		}
	}
	return cmd
}

// sinceTime reads --since: an RFC 3339 time, or a duration before now.
func sinceTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("--since %q: give a time (RFC 3339, 2026-12-06T10:00:00Z) or a duration ago (90m)", s)
	}
	return time.Now().Add(-d), nil
}

func (c *cli) newEventSendCmd() *cobra.Command {
	var data, id string
	cmd := &cobra.Command{
		Use:   "send NAME [--data JSON|@file.json] [--id ID]",
		Short: "Send an event: it starts, resumes and cancels the runs whose triggers, waits and cancel_on match it",
		Long: `send stores an event and prints what it did: the runs its triggers started, the
wait_for_event steps it completed, the runs its cancel_on canceled (docs/events.md).
--data is the event's JSON, or @file to read it from a file; without it the data is
null. --id makes it safe to repeat: the same id is one event, done once.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			body := client.EventBody{Name: args[0]}
			if id != "" {
				body.Id = &id
			}
			raw := []byte(data)
			if file, isFile := strings.CutPrefix(data, "@"); isFile {
				if raw, err = os.ReadFile(file); err != nil {
					return fmt.Errorf("read event data: %w", err)
				}
			}
			if len(raw) > 0 {
				if err := checkJSON(raw); err != nil {
					return fmt.Errorf("--data is not valid JSON: %w", err)
				}
				body.Data = json.RawMessage(raw)
			}
			resp, err := cl.SendEventWithResponse(cmd.Context(), body)
			if err != nil {
				return fmt.Errorf("send event %s: %w", args[0], err)
			}
			if resp.JSON202 == nil {
				return unexpected("send event", resp.StatusCode())
			}
			c.printEventAnswer(resp.JSON202.EventId, resp.JSON202.Duplicate, deref(resp.JSON202.Started),
				deref(resp.JSON202.Resumed), deref(resp.JSON202.Canceled), deref(resp.JSON202.Flow), deref(resp.JSON202.Errors))
			return nil
		},
	}
	cmd.Flags().StringVar(&data, "data", "", "the event's data: JSON, or @file")
	cmd.Flags().StringVar(&id, "id", "", "the event's id: the same id again is the same event, done once")
	return cmd
}

func (c *cli) printEventAnswer(id string, dup bool, started []client.EventStarted, resumed []client.EventResumed,
	canceled []string, flow []client.EventFlow, errs []client.EventError) {
	if dup {
		fmt.Fprintf(c.stdout, "event %s was received before: nothing done again; it did:\n", id)
	} else {
		fmt.Fprintf(c.stdout, "event %s\n", id)
	}
	for _, s := range started {
		fmt.Fprintf(c.stdout, "started  run %s (%s version %d, triggers[%d])\n", s.RunId, s.Workflow, s.Version, s.Trigger)
	}
	for _, r := range resumed {
		fmt.Fprintf(c.stdout, "resumed  run %s step %s\n", r.RunId, r.Step)
	}
	for _, r := range canceled {
		fmt.Fprintf(c.stdout, "canceled run %s\n", r)
	}
	for _, f := range flow {
		fmt.Fprintf(c.stdout, "%-8s %s version %d, triggers[%d] (%s key %q)%s\n", f.Action, f.Workflow, f.Version, f.Trigger, f.Kind, f.Key, flowDetail(f))
	}
	for _, e := range errs {
		fmt.Fprintf(c.stdout, "error    %s version %d %s: %s\n", e.Workflow, e.Version, e.Where, e.Message)
	}
	if len(started)+len(resumed)+len(canceled)+len(flow)+len(errs) == 0 {
		fmt.Fprintln(c.stdout, "nothing matched it")
	}
}

func (c *cli) newEventGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show a received event: its data and what it did",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			resp, err := cl.GetReceivedEventWithResponse(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("get event %s: %w", args[0], err)
			}
			ev := resp.JSON200
			if ev == nil {
				return unexpected("get event", resp.StatusCode())
			}
			data, _ := json.Marshal(ev.Data)
			fmt.Fprintf(c.stdout, "name      %s\nreceived  %s\nby        %s\ndata      %s\n", ev.Name, formatTime(ev.ReceivedAt), ev.Actor, data)
			c.printEventAnswer(ev.EventId, false, deref(ev.Started), deref(ev.Resumed), deref(ev.Canceled), deref(ev.Flow), deref(ev.Errors))
			return nil
		},
	}
}

// flowDetail says what a flow control entry of an event's answer held it for:
// the key's unfinished run, or the window and when its run starts.
func flowDetail(f client.EventFlow) string {
	var out string
	if f.RunId != nil {
		out += ": run " + *f.RunId
	}
	if f.Events != nil && f.DueAt != nil {
		out += fmt.Sprintf(": %d events held, its run by %s", *f.Events, formatTime(*f.DueAt))
	}
	return out
}
