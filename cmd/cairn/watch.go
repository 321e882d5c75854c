package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cairnrun/cairn/client"
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
	if err := cl.FollowRun(ctx, id, 0, on, c.followOptions()); err != nil {
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

// followOptions are the CLI's settings of a followed event stream (the client's
// defaults), with reconnections logged to stderr.
func (c *cli) followOptions() client.FollowOptions {
	return client.FollowOptions{Logger: c.logger()}
}
