package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

func (c *cli) newRunOutputCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "output ID STEP",
		Short: "Write a step's output (streamed) to stdout or a file",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, cl, err := c.runClient(args[0])
			if err != nil {
				return err
			}
			resp, err := cl.GetStepOutput(cmd.Context(), id, args[1])
			if err != nil {
				return fmt.Errorf("output of step %s: %w", args[1], err)
			}
			defer resp.Body.Close()
			return c.copyOut(resp.Body, file)
		},
	}
	cmd.Flags().StringVarP(&file, "output", "o", "", "file to write (default: stdout)")
	return cmd
}

// copyOut streams r to stdout, or to file: written beside it first and renamed into
// place, so that a broken download never leaves a truncated file under its name.
func (c *cli) copyOut(r io.Reader, file string) error {
	if file == "" || file == "-" {
		lw := &lastByteWriter{w: c.stdout}
		if _, err := io.Copy(lw, r); err != nil {
			return fmt.Errorf("download: %w", err)
		}
		// Keep the prompt on its own line on a terminal; pipes get the exact bytes.
		if lw.n > 0 && lw.last != '\n' && isTerminal(c.stdout) {
			fmt.Fprintln(c.stdout)
		}
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".part-*")
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	defer os.Remove(tmp.Name())              // after a successful rename this fails harmlessly
	if err := tmp.Chmod(0o644); err != nil { // CreateTemp makes it 0600
		tmp.Close()
		return fmt.Errorf("download to %s: %w", file, err)
	}
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return fmt.Errorf("download to %s: %w", file, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("download to %s: %w", file, err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("download to %s: %w", file, err)
	}
	return nil
}

// lastByteWriter remembers the last byte written through it.
type lastByteWriter struct {
	w    io.Writer
	n    int64
	last byte
}

func (l *lastByteWriter) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	if n > 0 {
		l.n += int64(n)
		l.last = p[n-1]
	}
	return n, err
}
