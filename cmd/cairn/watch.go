package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cairnrun/cairn/client"
)

// Reconnection of a dropped event stream: the delay doubles from the first up to
// the last; after maxStreamFailures attempts in a row without an event, give up.
const (
	reconnectFirst    = 200 * time.Millisecond
	reconnectMax      = 5 * time.Second
	maxStreamFailures = 10
	// maxEventSize bounds one SSE line (an event's JSON).
	maxEventSize = 4 << 20
)

func (c *cli) newRunWatchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "watch ID",
		Short: "Follow a run live: its steps, updated on every event, until it ends",
		Long: `watch follows the run's event stream. On a terminal it redraws a table of the
steps in place on every event; otherwise it prints one line per event. At the end it
prints the run and its steps, and fails unless the run succeeded.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, cl, err := c.runClient(args[0])
			if err != nil {
				return err
			}
			return c.watch(cmd.Context(), cl, id)
		},
	}
}

func (c *cli) watch(ctx context.Context, cl *client.Client, id uuid.UUID) error {
	var on func(*client.Event) error
	var live *liveTable
	if f, ok := c.stdout.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		live = &liveTable{w: c.stdout, fd: int(f.Fd())}
		if err := live.draw(ctx, cl, id, nil); err != nil {
			return err
		}
		on = func(ev *client.Event) error { return live.draw(ctx, cl, id, ev) }
	} else {
		on = func(ev *client.Event) error {
			_, err := fmt.Fprintln(c.stdout, eventLine(ev))
			return err
		}
	}
	if err := c.follow(ctx, cl, id, on); err != nil {
		return stoppedFollowing(id, err)
	}
	if live != nil {
		live.clear()
	} else {
		fmt.Fprintln(c.stdout)
	}
	return c.showRun(ctx, cl, id, false)
}

// eventLine is the one-line form of an event: time, seq, type, step, attempt and,
// for failures, the error.
func eventLine(ev *client.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  #%-4d %-16s", ev.CreatedAt.Local().Format("15:04:05.000"), ev.Seq, ev.Type)
	if ev.Step != nil {
		fmt.Fprintf(&b, " %s", *ev.Step)
	}
	if ev.Attempt != nil {
		fmt.Fprintf(&b, " attempt %d", *ev.Attempt)
	}
	if data, ok := ev.Data.(map[string]any); ok {
		if msg := errorMessage(data["error"]); msg != "" {
			fmt.Fprintf(&b, ": %s", msg)
		}
	}
	return strings.TrimRight(b.String(), " ")
}

// liveTable redraws a run's step table in place with ANSI escapes.
type liveTable struct {
	w     io.Writer
	fd    int
	lines int // lines drawn last time
}

func (t *liveTable) draw(ctx context.Context, cl *client.Client, id uuid.UUID, ev *client.Event) error {
	runResp, stepsResp, err := fetchRun(ctx, cl, id, "watch run")
	if err != nil {
		return err
	}
	now := time.Now()
	run := runResp.JSON200
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "run %s  %s v%d  %s  %s\n", run.Id, run.Workflow, run.Version, run.Status, span(run.StartedAt, run.FinishedAt, now))
	if ev != nil {
		fmt.Fprintf(&buf, "last event: %s\n", eventLine(ev))
	}
	fmt.Fprintln(&buf)
	if err := writeSteps(&buf, deref(stepsResp.JSON200.Items), now); err != nil {
		return err
	}
	// Lines longer than the terminal would wrap and break the count of lines to go
	// back up: cut them.
	width := 0
	if w, _, err := term.GetSize(t.fd); err == nil {
		width = w
	}
	var out strings.Builder
	t.erase(&out)
	t.lines = 0
	for line := range strings.SplitSeq(strings.TrimRight(buf.String(), "\n"), "\n") {
		if r := []rune(line); width > 1 && len(r) >= width {
			line = string(r[:width-1])
		}
		out.WriteString(line)
		out.WriteString("\n")
		t.lines++
	}
	_, err = io.WriteString(t.w, out.String())
	return err
}

// erase moves the cursor to the start of the table drawn last and clears to the end
// of the screen.
func (t *liveTable) erase(out *strings.Builder) {
	if t.lines > 0 {
		fmt.Fprintf(out, "\x1b[%dF\x1b[J", t.lines)
	}
}

func (t *liveTable) clear() {
	var out strings.Builder
	t.erase(&out)
	t.lines = 0
	_, _ = io.WriteString(t.w, out.String())
}

// follow reads the run's event stream, calling on (when set) for every event, and
// returns once the run has ended. A stream that drops is reopened after the last
// event seen (Last-Event-ID), with a growing delay; answers of the server other than
// 5xx (404, 401, …) end it at once.
func (c *cli) follow(ctx context.Context, cl *client.Client, id uuid.UUID, on func(*client.Event) error) error {
	logger := c.logger()
	var last int64
	failures := 0
	delay := reconnectFirst
	for {
		before := last
		final, clean, err := streamEvents(ctx, cl, id, &last, on)
		switch {
		case final:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && !retryable(err):
			return fmt.Errorf("follow run %s: %w", id, err)
		}
		if clean {
			// The server ends a stream without the final event when the run had
			// ended before (nothing left to replay after Last-Event-ID) or when it
			// shuts down: ask which.
			resp, gerr := cl.GetRunWithResponse(ctx, id)
			if gerr == nil && resp.JSON200 != nil && isFinalRunStatus(resp.JSON200.Status) {
				return nil
			}
			if gerr != nil && !retryable(gerr) {
				return fmt.Errorf("follow run %s: %w", id, gerr)
			}
			err = errors.Join(err, gerr)
		}
		if last > before {
			failures, delay = 0, reconnectFirst
		}
		failures++
		if failures > maxStreamFailures {
			return fmt.Errorf("follow run %s: the event stream keeps failing: %w", id, err)
		}
		logger.Warn("event stream ended early; reconnecting", "run_id", id.String(), "after", last, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, reconnectMax)
	}
}

// retryable reports whether following may go on after err: network trouble and 5xx
// answers, not a refusal (4xx) of the server.
func retryable(err error) bool {
	var p *client.Problem
	if errors.As(err, &p) {
		return p.Status >= 500
	}
	return true
}

// streamEvents reads one connection of the event stream, from the event after *last.
// final reports that the run's final event was read; clean that the server ended the
// stream itself (EOF) rather than it breaking.
func streamEvents(ctx context.Context, cl *client.Client, id uuid.UUID, last *int64, on func(*client.Event) error) (final, clean bool, err error) {
	params := &client.StreamEventsParams{}
	if *last > 0 {
		lastID := strconv.FormatInt(*last, 10)
		params.LastEventID = &lastID
	}
	resp, err := cl.StreamEvents(ctx, id, params)
	if err != nil {
		return false, false, err
	}
	defer resp.Body.Close()
	err = readSSE(resp.Body, func(msg sseMessage) error {
		if msg.data == "" {
			return nil
		}
		var ev client.Event
		if err := json.Unmarshal([]byte(msg.data), &ev); err != nil {
			return fmt.Errorf("decode event %s: %w", msg.id, err)
		}
		if ev.Seq <= *last {
			return nil // replayed twice: already seen
		}
		*last = ev.Seq
		if on != nil {
			if err := on(&ev); err != nil {
				return err
			}
		}
		if isFinalEvent(ev.Type) {
			final = true
			return errStreamDone
		}
		return nil
	})
	switch {
	case final:
		return true, true, nil
	case err == nil:
		return false, true, nil
	}
	return false, false, err
}

// errStreamDone stops readSSE after the final event.
var errStreamDone = errors.New("stream done")

func isFinalEvent(typ string) bool {
	return typ == "run.succeeded" || typ == "run.failed" || typ == "run.canceled"
}

// sseMessage is one server-sent event.
type sseMessage struct {
	id, event, data string
}

// readSSE parses a text/event-stream, calling fn for every message, until EOF
// (nil), a read error, or an error of fn (returned, except errStreamDone).
func readSSE(r io.Reader, fn func(sseMessage) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxEventSize)
	var msg sseMessage
	var data []string
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if len(data) > 0 || msg.event != "" {
				msg.data = strings.Join(data, "\n")
				if err := fn(msg); err != nil {
					if errors.Is(err, errStreamDone) {
						return nil
					}
					return err
				}
			}
			msg, data = sseMessage{}, nil
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment or keep-alive
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			msg.id = value
		case "event":
			msg.event = value
		case "data":
			data = append(data, value)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read event stream: %w", err)
	}
	return nil
}
