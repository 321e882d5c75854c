// Command function is the Lambda function of the lambda-hello example, written on
// Cairn's Go function SDK (package fn): deployed as "cairn-hello" (custom runtime
// provided.al2023, handler bootstrap), it greets the run's input. Its input also
// lets it show how Cairn treats each way a Lambda step can end:
//
//	{"name": "ada"}          {"greeting": "hello, ada"}
//	{"fail": "terminal"}     fn.Terminal: Cairn does not retry
//	{"fail": "retryable"}    fn.Retryable, retried under the step's retry policy
//	{"sleep": "1m"}          answers after that long (or at the Lambda timeout):
//	                         a step whose timeout is shorter times out
//
// It also reads what upstream steps sent it (deps) and counts the bytes: an
// output over Cairn's inline limit arrives as {"$blob": {"url": …}}, a presigned
// URL that fn opens as a stream; the output then says
// {"greeting": …, "deps_bytes": {"<step>": N}}.
//
// Build it with `make lambda-zip` (linux/amd64, -tags lambda.norpc, zipped into
// bin/lambda-hello.zip), or run it locally under AWS's Runtime Interface
// Emulator (docs/functions.md). fn.Run serves Lambda when AWS_LAMBDA_RUNTIME_API
// is set; the same handler would serve exec and http steps.
package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/cairnrun/cairn/fn"
)

// input is the run's input.
type input struct {
	Name string `json:"name"`
	// Fail, when "terminal" or "retryable", makes the function fail that way.
	Fail string `json:"fail"`
	// Sleep, a Go duration such as "1m", makes the function wait that long first.
	Sleep string `json:"sleep"`
}

// output is the step's output.
type output struct {
	Greeting  string           `json:"greeting"`
	DepsBytes map[string]int64 `json:"deps_bytes,omitempty"`
}

func handle(ctx context.Context, c *fn.Call, in input) (output, error) {
	if in.Sleep != "" {
		d, err := time.ParseDuration(in.Sleep)
		if err != nil {
			return output{}, fn.Terminal("bad_input", "sleep: %v", err)
		}
		// Work that ignores the deadline (ctx): Lambda itself ends it, with "Task
		// timed out", the platform's timeout that tests show a step meeting. (A
		// function watching ctx.Done() would race Lambda to the same moment.)
		time.Sleep(d)
	}
	switch in.Fail {
	case "":
	case "terminal":
		return output{}, fn.Terminal("asked_to_fail", "asked to fail for good")
	case "retryable":
		return output{}, fn.Retryable("asked_to_fail", "asked to fail on attempt %d; try again", c.Attempt())
	default:
		return output{}, fn.Terminal("bad_input", "fail must be terminal or retryable, not %q", in.Fail)
	}
	if in.Name == "" {
		in.Name = "world"
	}
	out := output{Greeting: "hello, " + in.Name}
	for _, step := range c.Deps() {
		n, err := depBytes(ctx, c, step)
		if err != nil {
			return output{}, fmt.Errorf("read the output of %s: %w", step, err)
		}
		if out.DepsBytes == nil {
			out.DepsBytes = map[string]int64{}
		}
		out.DepsBytes[step] = n
	}
	return out, nil
}

// depBytes returns the size of an upstream output: the inline value's, or, for
// a $blob reference, that of the body its presigned URL serves.
func depBytes(ctx context.Context, c *fn.Call, step string) (int64, error) {
	r, err := c.OpenDep(ctx, step)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	n, err := io.Copy(io.Discard, r)
	if err != nil {
		return 0, err
	}
	if b, ok := fn.ParseBlob(c.Envelope().Deps[step]); ok && n != b.Size {
		return 0, fmt.Errorf("the $blob URL served %d bytes, not %d", n, b.Size)
	}
	return n, nil
}

func main() {
	fn.Run(fn.Typed(handle))
}
