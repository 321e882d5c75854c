// Command function is the Lambda function of the lambda-hello example: deployed as
// "cairn-hello" (custom runtime provided.al2023, handler bootstrap), it greets the
// run's input. Its input also lets it show how Cairn treats each way a Lambda
// step can end:
//
//	{"name": "ada"}          {"greeting": "hello, ada"}
//	{"fail": "terminal"}     an error whose text is {"message": …, "retryable": false}:
//	                         Cairn reads that from errorMessage and does not retry
//	{"fail": "retryable"}    a plain error, retried under the step's retry policy
//	{"sleep": "1m"}          answers after that long (or at the Lambda timeout):
//	                         a step whose timeout is shorter times out
//
// It also reads what upstream steps sent it (the envelope's deps) and counts the
// bytes: an output over Cairn's inline limit arrives as {"$blob": {"url": …}}, a
// presigned URL that the function GETs; the output then says
// {"greeting": …, "deps_bytes": {"<step>": N}}.
//
// Build it with `make lambda-zip` (linux/amd64, -tags lambda.norpc, zipped into
// bin/lambda-hello.zip), or run it locally under AWS's Runtime Interface
// Emulator (docs/functions.md). A handler runs at least once per attempt: the
// envelope's run_id and step identify the work for functions with side effects.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
)

// envelope is the part of Cairn's envelope this function reads.
type envelope struct {
	RunID   string                     `json:"run_id"`
	Step    string                     `json:"step"`
	Attempt int                        `json:"attempt"`
	Input   json.RawMessage            `json:"input"`
	Deps    map[string]json.RawMessage `json:"deps"`
}

// input is the run's input.
type input struct {
	Name string `json:"name"`
	// Fail, when "terminal" or "retryable", makes the function fail that way.
	Fail string `json:"fail"`
	// Sleep, a Go duration such as "1m", makes the function wait that long first.
	Sleep string `json:"sleep"`
}

// blobRef is Cairn's reference to a value too large to travel inline.
type blobRef struct {
	Blob *struct {
		URL  string `json:"url"`
		Size int64  `json:"size"`
	} `json:"$blob"`
}

// output is the step's output.
type output struct {
	Greeting  string           `json:"greeting"`
	DepsBytes map[string]int64 `json:"deps_bytes,omitempty"`
}

// terminalError is an error Cairn must not retry: its text is the JSON object
// that Cairn looks for in a function error's errorMessage.
type terminalError struct{ message string }

func (e terminalError) Error() string {
	b, _ := json.Marshal(struct {
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
	}{e.message, false})
	return string(b)
}

func handle(ctx context.Context, env envelope) (output, error) {
	var in input
	if len(env.Input) > 0 && string(env.Input) != "null" {
		if err := json.Unmarshal(env.Input, &in); err != nil {
			return output{}, terminalError{fmt.Sprintf("input is not an object: %v", err)}
		}
	}
	if in.Sleep != "" {
		d, err := time.ParseDuration(in.Sleep)
		if err != nil {
			return output{}, terminalError{fmt.Sprintf("sleep: %v", err)}
		}
		// Work that ignores the deadline (ctx): Lambda itself ends it, with "Task
		// timed out", the platform's timeout that tests show a step meeting. (A
		// function watching ctx.Done() would race Lambda to the same moment.)
		time.Sleep(d)
	}
	switch in.Fail {
	case "":
	case "terminal":
		return output{}, terminalError{"asked to fail for good"}
	case "retryable":
		return output{}, fmt.Errorf("asked to fail on attempt %d; try again", env.Attempt)
	default:
		return output{}, terminalError{fmt.Sprintf("fail must be terminal or retryable, not %q", in.Fail)}
	}
	if in.Name == "" {
		in.Name = "world"
	}
	out := output{Greeting: "hello, " + in.Name}
	for step, value := range env.Deps {
		n, err := depBytes(ctx, value)
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
func depBytes(ctx context.Context, value json.RawMessage) (int64, error) {
	var ref blobRef
	if json.Unmarshal(value, &ref) != nil || ref.Blob == nil {
		return int64(len(value)), nil
	}
	if ref.Blob.URL == "" {
		return 0, fmt.Errorf("a $blob reference without a URL (a blob store that cannot presign)")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ref.Blob.URL, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET the $blob URL: %s", resp.Status)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return 0, err
	}
	if n != ref.Blob.Size {
		return 0, fmt.Errorf("the $blob URL served %d bytes, not %d", n, ref.Blob.Size)
	}
	return n, nil
}

func main() {
	lambda.Start(handle)
}
