package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// The CLI's output: tables, and the values in their cells.

// table aligns columns (text/tabwriter) and writes the lines without the padding
// that an empty last column leaves behind. Call Flush when done.
type table struct {
	out io.Writer
	buf bytes.Buffer
	tw  *tabwriter.Writer
}

func newTable(w io.Writer) *table {
	t := &table{out: w}
	t.tw = tabwriter.NewWriter(&t.buf, 0, 0, 2, ' ', 0)
	return t
}

// Write implements io.Writer: cells separated by tabs, rows by newlines.
func (t *table) Write(p []byte) (int, error) { return t.tw.Write(p) }

// Flush writes the aligned table.
func (t *table) Flush() error {
	if err := t.tw.Flush(); err != nil {
		return err
	}
	var out bytes.Buffer
	for line := range strings.Lines(t.buf.String()) {
		out.WriteString(strings.TrimRight(line, " \n"))
		out.WriteByte('\n')
	}
	t.buf.Reset()
	_, err := t.out.Write(out.Bytes())
	return err
}

// formatTime shows a time in the local zone, to the second.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// formatBytes shows a size in B, KiB, MiB or GiB.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 2; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMG"[exp])
}

// shorten keeps a table cell on one line and at most n characters.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// errorMessage renders a stored error: its "message" when it has one, else its JSON.
func errorMessage(v any) string {
	switch e := v.(type) {
	case nil:
		return ""
	case string:
		return e
	case map[string]any:
		if msg, ok := e["message"].(string); ok {
			return msg
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// span is the time from start to end, or to now while running; "-" before start.
func span(start, end *time.Time, now time.Time) string {
	if start == nil {
		return "-"
	}
	if end == nil {
		return formatDuration(now.Sub(*start))
	}
	return formatDuration(end.Sub(*start))
}

// formatDuration rounds for reading: 340ms, 1.25s, 2m3s.
func formatDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
