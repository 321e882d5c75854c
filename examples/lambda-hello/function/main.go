// Command function is the Lambda function of the lambda-hello example: deployed as
// "cairn-hello" (custom runtime provided.al2023, handler bootstrap), it greets the
// run's input.
//
// It reads Cairn's envelope (DESIGN §5) and returns {"greeting": "hello, <name>"}.
// An input of {"fail": "terminal"} makes it fail with an error whose text is
// {"message": …, "retryable": false}: Cairn reads that from the function error's
// errorMessage and does not retry. {"fail": "retryable"} fails with a plain error,
// which Cairn retries under the step's retry policy.
//
// Build it with `make lambda-zip` (linux/amd64, -tags lambda.norpc, zipped into
// bin/lambda-hello.zip). A handler runs at least once per attempt: the envelope's
// run_id and step identify the work for functions with side effects.
package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-lambda-go/lambda"
)

// envelope is the part of Cairn's envelope this function reads.
type envelope struct {
	RunID   string          `json:"run_id"`
	Step    string          `json:"step"`
	Attempt int             `json:"attempt"`
	Input   json.RawMessage `json:"input"`
}

// input is the run's input.
type input struct {
	Name string `json:"name"`
	// Fail, when "terminal" or "retryable", makes the function fail that way.
	Fail string `json:"fail"`
}

// output is the step's output.
type output struct {
	Greeting string `json:"greeting"`
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

func handle(_ context.Context, env envelope) (output, error) {
	var in input
	if len(env.Input) > 0 && string(env.Input) != "null" {
		if err := json.Unmarshal(env.Input, &in); err != nil {
			return output{}, terminalError{fmt.Sprintf("input is not an object: %v", err)}
		}
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
	return output{Greeting: "hello, " + in.Name}, nil
}

func main() {
	lambda.Start(handle)
}
