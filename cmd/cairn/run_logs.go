package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

func (c *cli) newRunLogsCmd() *cobra.Command {
	var attempt int64
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs ID STEP",
		Short: "Print the log (stderr) of a step's attempt, the newest by default",
		Long: "Print the log (stderr) of a step's attempt, the newest by default. While the attempt runs, what it has\n" +
			"logged so far (published about once a second). With --follow, keep printing as it logs until the attempt ends\n" +
			"(waiting for the step's first attempt if it has none yet).",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, cl, err := c.runClient(args[0])
			if err != nil {
				return err
			}
			if follow {
				return c.followLog(cmd.Context(), cl, id, args[1], attempt)
			}
			params := &client.GetAttemptLogParams{}
			if attempt > 0 {
				params.Attempt = &attempt
			}
			resp, err := cl.GetAttemptLog(cmd.Context(), id, args[1], params)
			if err != nil {
				return fmt.Errorf("log of step %s: %w", args[1], err)
			}
			defer resp.Body.Close()
			return c.copyOut(resp.Body, "")
		},
	}
	cmd.Flags().Int64Var(&attempt, "attempt", 0, "attempt number (0: the newest)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing the log as the attempt writes it, until it ends")
	return cmd
}

// followInterval is how often `cairn run logs --follow` asks for more.
const followInterval = time.Second

// followLog prints an attempt's log as it grows: it reads from the offset where
// the last read ended until the API says the attempt is complete. Attempt 0 is
// the step's newest attempt when following starts (the first, once it runs).
func (c *cli) followLog(ctx context.Context, cl *client.Client, id uuid.UUID, key string, attempt int64) error {
	for attempt == 0 {
		resp, err := cl.ListAttemptsWithResponse(ctx, id, key)
		if err != nil {
			return fmt.Errorf("attempts of step %s: %w", key, err)
		}
		if resp.JSON200 == nil {
			return unexpected("logs", resp.StatusCode())
		}
		if items := deref(resp.JSON200.Items); len(items) > 0 {
			attempt = items[len(items)-1].Number
			break
		}
		if err := sleepCtx(ctx, followInterval); err != nil {
			return err
		}
	}
	var offset int64
	for {
		resp, err := cl.GetAttemptLog(ctx, id, key, &client.GetAttemptLogParams{Attempt: &attempt, Offset: &offset})
		if err != nil {
			return fmt.Errorf("log of step %s: %w", key, err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return unexpected("logs", resp.StatusCode)
		}
		if at, err := strconv.ParseInt(resp.Header.Get("Cairn-Log-Offset"), 10, 64); err == nil && at > offset {
			fmt.Fprintf(c.stderr, "cairn: %d bytes of the log were not kept (only its tail is, while it runs)\n", at-offset)
			offset = at
		}
		n, err := io.Copy(c.stdout, resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("log of step %s: %w", key, err)
		}
		offset += n
		if resp.Header.Get("Cairn-Log-Complete") == "true" {
			return nil
		}
		if n == 0 {
			if err := sleepCtx(ctx, followInterval); err != nil {
				return err
			}
		}
	}
}

// sleepCtx waits d, or less when ctx ends (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
