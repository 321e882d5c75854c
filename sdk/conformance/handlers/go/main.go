// Command go is the conformance suite's handler on the Go SDK (package fn):
// one program that serves every case, choosing its behaviour from the step's
// params ("behavior"). The suite (sdk/conformance, driven by
// internal/e2e/conformance_test.go) runs it as an exec program, as an http
// function (CAIRN_FN_LISTEN) and under AWS's Lambda emulator. The Python and
// TypeScript handlers beside it do the same things on their SDKs.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cairnrun/cairn/fn"
)

// params are the step's `with` values the behaviours read.
type params struct {
	Behavior string `json:"behavior"`
	// count
	To      int `json:"to"`
	SleepMS int `json:"sleep_ms"`
	// fail
	Code    string `json:"code"`
	Message string `json:"message"`
	// suspend, big_output: where the handler reports to the test.
	Notify  string `json:"notify"`
	Timeout string `json:"timeout"`
	// big_output
	MiB int `json:"mib"`
	// produce
	Lines int `json:"lines"`
	// consume
	Dep string `json:"dep"`
}

func main() { fn.Run(handle) }

func handle(ctx context.Context, c *fn.Call) (any, error) {
	var p params
	if err := c.Params(&p); err != nil {
		return nil, fn.Terminal("bad_params", "%v", err)
	}
	switch p.Behavior {
	case "echo":
		return echo(ctx, c, p)
	case "count":
		return count(ctx, c, p)
	case "fail":
		return nil, fn.Terminal(p.Code, "%s", p.Message)
	case "suspend":
		return suspend(ctx, c, p)
	case "big_output":
		return bigOutput(c, p), nil
	case "produce":
		return &fn.Stream{ContentType: "application/jsonl", Write: func(w io.Writer) error {
			for i := range p.Lines {
				if _, err := fmt.Fprintf(w, "%d\n", i); err != nil {
					return err
				}
			}
			return nil
		}}, nil
	case "consume":
		return consume(ctx, c, p)
	}
	return nil, fn.Terminal("bad_params", "unknown behavior %q", p.Behavior)
}

// echo answers what the handler was given: input, params, deps (decoded into
// Go values), the idempotency key and the kind.
func echo(ctx context.Context, c *fn.Call, _ params) (any, error) {
	var in struct {
		Name string `json:"name"`
	}
	if err := c.Input(&in); err != nil {
		return nil, fn.Terminal("bad_input", "%v", err)
	}
	var raw map[string]any
	if err := c.Params(&raw); err != nil {
		return nil, err
	}
	deps := map[string]any{}
	for _, k := range c.Deps() {
		var v any
		if err := c.Dep(ctx, k, &v); err != nil {
			return nil, err
		}
		deps[k] = v
	}
	return map[string]any{
		"greeting":        "hello, " + in.Name,
		"params":          raw,
		"deps":            deps,
		"idempotency_key": c.IdempotencyKey(),
		"kind":            c.Kind(),
		"attempt":         c.Attempt(),
	}, nil
}

// count counts to p.To, one checkpoint and progress report a number, resuming
// from the newest checkpoint.
func count(ctx context.Context, c *fn.Call, p params) (any, error) {
	var cp struct {
		I int `json:"i"`
	}
	if _, err := c.Checkpoint(ctx, &cp); err != nil {
		return nil, err
	}
	from := cp.I
	for i := from + 1; i <= p.To; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		time.Sleep(time.Duration(p.SleepMS) * time.Millisecond)
		if err := c.SaveCheckpoint(ctx, map[string]int{"i": i}); err != nil {
			return nil, err
		}
		if err := c.Progress(ctx, map[string]int{"i": i}); err != nil {
			return nil, err
		}
	}
	return map[string]int{"count": p.To, "resumed_from": from, "attempt": c.Attempt()}, nil
}

// suspend hands the callback URL to "the third party" (the test) and suspends.
func suspend(ctx context.Context, c *fn.Call, p params) (any, error) {
	d, err := time.ParseDuration(p.Timeout)
	if err != nil {
		return nil, fn.Terminal("bad_params", "timeout: %v", err)
	}
	url, err := c.Suspend(d)
	if err != nil {
		return nil, err
	}
	if err := notify(ctx, p.Notify, map[string]string{"run_id": c.RunID(), "callback_url": url}); err != nil {
		return nil, err
	}
	return nil, nil
}

// bigOutput streams p.MiB MiB, then tells the test its peak resident size.
func bigOutput(c *fn.Call, p params) *fn.Stream {
	resetPeakRSS()
	return &fn.Stream{Write: func(w io.Writer) error {
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for range p.MiB * 16 {
			if _, err := w.Write(chunk); err != nil {
				return err
			}
		}
		return notify(context.Background(), p.Notify, map[string]any{"run_id": c.RunID(), "peak_rss_bytes": peakRSS()})
	}}
}

// consume reads an upstream output as a stream of lines, and sums them.
func consume(ctx context.Context, c *fn.Call, p params) (any, error) {
	_, isBlob := fn.ParseBlob(c.Envelope().Deps[p.Dep])
	r, err := c.OpenDep(ctx, p.Dep)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	lines, sum := 0, 0
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		n, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil {
			return nil, fn.Terminal("bad_dep", "line %d: %v", lines+1, err)
		}
		lines++
		sum += n
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return map[string]any{"lines": lines, "sum": sum, "blob": isBlob}, nil
}

// peakRSS is the process's peak resident set size (VmHWM), in bytes.
func peakRSS() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return -1
}

// resetPeakRSS starts the peak (VmHWM) again from the current size, so that it
// measures this call, not an earlier one of the same http or lambda process.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// notify POSTs v as JSON to the test's URL.
func notify(ctx context.Context, url string, v any) error {
	b, _ := json.Marshal(v)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("notify: %s", resp.Status)
	}
	return nil
}
