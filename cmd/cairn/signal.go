package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/client"
)

func (c *cli) newRunSignalCmd() *cobra.Command {
	var data, contentType, idemKey string
	cmd := &cobra.Command{
		Use:   "signal ID NAME [--data JSON|@file]",
		Short: "Send a signal to a run: its signal step of that name succeeds with the payload",
		Long: `signal delivers a payload to the run's signal step NAME (signal: {name: NAME} in
cairn.yaml): the step waiting for it succeeds with the payload as its output. A
signal sent before the step waits is kept, in order, for it.

--data takes JSON, or @file to stream a file of any size: sent as JSON when its name
ends in .json, else as bytes (stored in the blob store; the step's output is then a
$blob reference); --content-type overrides. Without --data the payload is null.
With --idempotency-key, a repeat is applied once.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, cl, err := c.runClient(args[0])
			if err != nil {
				return err
			}
			name := args[1]
			var body io.Reader = bytes.NewReader(nil) // a length of 0: the payload is null
			ct := "application/json"
			switch file, isFile := strings.CutPrefix(data, "@"); {
			case isFile:
				f, err := os.Open(file)
				if err != nil {
					return fmt.Errorf("read signal data: %w", err)
				}
				defer f.Close()
				body = f
				if !strings.HasSuffix(strings.ToLower(file), ".json") {
					ct = "application/octet-stream"
				}
			case data != "":
				if err := checkJSON([]byte(data)); err != nil {
					return fmt.Errorf("--data is not valid JSON (use @file for other bytes): %w", err)
				}
				body = bytes.NewReader([]byte(data))
			}
			if contentType != "" {
				ct = contentType
			}
			params := &client.SendSignalParams{}
			if idemKey != "" {
				params.IdempotencyKey = &idemKey
			}
			resp, err := cl.SendSignalWithBodyWithResponse(cmd.Context(), id, name, params, ct, body)
			if err != nil {
				return fmt.Errorf("signal %s to run %s: %w", name, id, err)
			}
			r := resp.JSON200
			if r == nil {
				return unexpected("send signal", resp.StatusCode())
			}
			switch {
			case r.Duplicate:
				fmt.Fprintf(c.stdout, "signal %s #%d sent before (same idempotency key): not applied again\n", name, r.Seq)
			case r.Buffered:
				fmt.Fprintf(c.stdout, "signal %s #%d kept for the next step waiting for it\n", name, r.Seq)
			default:
				fmt.Fprintf(c.stdout, "signal %s #%d completed step %s\n", name, r.Seq, deref(r.Step))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&data, "data", "", "the payload: JSON, or @file (any bytes)")
	f.StringVar(&contentType, "content-type", "", "the payload's Content-Type (default: application/json, or application/octet-stream for a file not named *.json)")
	f.StringVar(&idemKey, "idempotency-key", "", "makes the signal safe to repeat: the same key is applied once")
	return cmd
}
