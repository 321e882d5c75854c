package fn

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambda/messages"
)

// LambdaHandler adapts h to aws-lambda-go (lambda.Start(fn.LambdaHandler(h))):
// the payload is the envelope, the response payload the output. A failure is
// a function error whose errorType is its code and whose errorMessage is
// {"message", "code", "retryable"}, which Cairn reads (retryable: false fails
// the step at once). Lambda bounds a response to 6 MB, so the output is
// buffered; larger outputs need an http or exec function.
func LambdaHandler(h Handler) func(ctx context.Context, payload json.RawMessage) (io.Reader, error) {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	return func(ctx context.Context, payload json.RawMessage) (io.Reader, error) {
		var env Envelope
		if err := json.Unmarshal(payload, &env); err != nil {
			return nil, lambdaError(Terminal("protocol", "decode the envelope: %v", err))
		}
		call := newCall(env, KindLambda, &urlChannel{env: &env, client: http.DefaultClient, logger: logger}, logger)
		out, fail := invoke(ctx, h, call)
		if fail != nil {
			call.logger.Warn("the handler failed", "error", fail.Error())
			return nil, lambdaError(fail)
		}
		var buf bytes.Buffer
		if err := out.write(&buf); err != nil {
			return nil, lambdaError(Retryable("output", "write the output: %v", err))
		}
		return &buf, nil
	}
}

func lambdaError(e *Error) error {
	typ := e.Code
	if typ == "" {
		typ = "Error"
	}
	return messages.InvokeResponse_Error{Message: string(e.jsonText()), Type: typ}
}

// startLambda serves Lambda invocations until the runtime ends the process.
func startLambda(h Handler) { lambda.Start(LambdaHandler(h)) }
