package functions

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/internal/testenv"
)

// TestLambdaEmulator runs the lambda-hello example function under AWS's Lambda
// Runtime Interface Emulator and invokes it through the Lambda invoker in
// emulator mode: the real bootstrap, aws-lambda-go's runtime loop, the Runtime
// API and the Invoke path, reached by aws-sdk-go-v2. Each case has an emulator
// of its own, since one serves one invocation at a time and a timed-out one
// keeps it busy.
func TestLambdaEmulator(t *testing.T) {
	t.Parallel()
	bootstrap := testenv.LambdaHello(t)

	// A large upstream output, served like a presigned GET of the blob store.
	big := strings.Repeat("x", 300<<10)
	blobs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(big))
	}))
	t.Cleanup(blobs.Close)

	tests := []struct {
		name  string
		input string
		deps  map[string]json.RawMessage
		// functionTimeout is the function's own timeout in the emulator.
		functionTimeout time.Duration
		output          string
		// retryable is nil when the call succeeds.
		retryable *bool
		message   string
	}{
		{name: "greets", input: `{"name":"ada"}`, output: `{"greeting":"hello, ada"}`},
		{name: "terminal failure", input: `{"fail":"terminal"}`, retryable: new(false),
			message: "lambda cairn-hello:live: asked_to_fail: asked to fail for good"},
		{name: "retryable failure", input: `{"fail":"retryable"}`, retryable: new(true),
			message: "lambda cairn-hello:live: asked_to_fail: asked to fail on attempt 1; try again"},
		{name: "the function's own timeout", input: `{"sleep":"1m"}`, functionTimeout: time.Second, retryable: new(true),
			message: "lambda cairn-hello:live: Task timed out after 1.00 seconds"},
		{
			name:  "large input by url",
			input: `{"name":"ada"}`,
			deps: map[string]json.RawMessage{
				"big": json.RawMessage(`{"$blob":{"digest":"sha256:00","size":307200,"url":"` + blobs.URL + `/object"}}`),
			},
			output: `{"greeting":"hello, ada","deps_bytes":{"big":307200}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			l := setupEmulator(t, bootstrap, tt.functionTimeout)
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
			defer cancel()
			sink := &testSink{}
			err := l.Invoke(ctx, emulatorInvocation(tt.input, tt.deps), sink)

			switch {
			case tt.retryable == nil:
				require.NoError(t, err)
				require.JSONEq(t, tt.output, sink.out.String())
				require.Equal(t, "application/json", sink.contentType)
			default:
				var fe *Error
				require.ErrorAs(t, err, &fe)
				require.Equal(t, CodeFunctionError, fe.Code)
				require.Equal(t, *tt.retryable, fe.Retryable, fe.Message)
				require.Equal(t, tt.message, fe.Message)
				require.Empty(t, sink.out.String(), "an error payload is not the output")
			}
		})
	}
}

// setupEmulator starts an emulator running bootstrap and returns an invoker in
// emulator mode that calls it.
func setupEmulator(t *testing.T, bootstrap string, functionTimeout time.Duration) *Lambda {
	t.Helper()
	emu := testenv.StartLambdaEmulator(t, bootstrap, &testenv.LambdaEmulatorConfig{FunctionTimeout: functionTimeout})
	// No region, no credentials: the emulator checks neither.
	l, err := NewLambda(context.Background(), &LambdaConfig{Endpoint: emu.Endpoint, Emulator: true})
	require.NoError(t, err)
	return l
}

// emulatorInvocation is an attempt of the lambda-hello step with that input.
func emulatorInvocation(input string, deps map[string]json.RawMessage) *Invocation {
	return &Invocation{
		Envelope: Envelope{RunID: "run-1", Workflow: "lambda-hello", Version: 1, Step: "hello", Attempt: 1,
			Input: json.RawMessage(input), Deps: deps},
		// Any name and qualifier: the emulator serves its one function as "function".
		Spec: Spec{Lambda: &LambdaSpec{Function: "cairn-hello", Qualifier: "live"}},
	}
}

// TestLambdaEmulatorContext: a call ends with its context (a step's timeout, a
// run's cancel), not with the function, and returns the context's cause.
func TestLambdaEmulatorContext(t *testing.T) {
	t.Parallel()
	bootstrap := testenv.LambdaHello(t)

	errTestTimeout := errors.New("step timed out")
	errTestCancel := errors.New("run canceled")
	tests := []struct {
		name  string
		ctx   func() (context.Context, context.CancelFunc)
		cause error
	}{
		{
			name: "timeout",
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeoutCause(context.Background(), 500*time.Millisecond, errTestTimeout)
			},
			cause: errTestTimeout,
		},
		{
			name: "cancel",
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancelCause(context.Background())
				time.AfterFunc(500*time.Millisecond, func() { cancel(errTestCancel) })
				return ctx, func() { cancel(nil) }
			},
			cause: errTestCancel,
		},
		{
			name: "already done",
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancelCause(context.Background())
				cancel(errTestCancel)
				return ctx, func() {}
			},
			cause: errTestCancel,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			l := setupEmulator(t, bootstrap, 0)
			ctx, cancel := tt.ctx()
			defer cancel()
			start := time.Now()
			// The function would answer after a minute.
			err := l.Invoke(ctx, emulatorInvocation(`{"sleep":"1m"}`, nil), &testSink{})
			require.ErrorIs(t, err, tt.cause)
			require.Less(t, time.Since(start), 30*time.Second)
		})
	}
}

// TestLambdaEmulatorOutputWriteFails: a sink that refuses the output (the lease
// is gone) fails the call with the sink's error.
func TestLambdaEmulatorOutputWriteFails(t *testing.T) {
	t.Parallel()

	l := setupEmulator(t, testenv.LambdaHello(t), 0)
	err := l.Invoke(context.Background(), emulatorInvocation(`{"name":"ada"}`, nil), &testSink{outputErr: ErrLeaseLost})
	require.ErrorIs(t, err, ErrLeaseLost)
}

// TestEmulatorError: which payloads the emulator's 200 answers are function
// errors (it drops X-Amz-Function-Error).
func TestEmulatorError(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		payload string
		want    bool
	}{
		{name: "go error", payload: `{"errorMessage":"boom","errorType":"errorString"}`, want: true},
		{name: "go panic", payload: `{"errorMessage":"boom","errorType":"string","stackTrace":[{"path":"main.go","line":1}]}`, want: true},
		{name: "node error", payload: `{"errorType":"Error","errorMessage":"boom","trace":["Error: boom"]}`, want: true},
		{name: "python error", payload: `{"errorMessage":"boom","errorType":"Exception","requestId":"r","stackTrace":[]}`, want: true},
		{name: "runtime exit", payload: `{"errorType":"Runtime.ExitError","errorMessage":"RequestId: r Error: Runtime exited with error: exit status 2"}`, want: true},
		{name: "emulator timeout", payload: `Task timed out after 3.00 seconds`, want: true},
		{name: "output", payload: `{"greeting":"hello"}`},
		{name: "output with an errorMessage among other fields", payload: `{"errorMessage":"none","errorType":"none","count":3}`},
		{name: "errorMessage without errorType", payload: `{"errorMessage":"boom"}`},
		{name: "errorType not a string", payload: `{"errorMessage":"boom","errorType":7}`},
		{name: "array", payload: `[1,2]`},
		{name: "text", payload: `hello`},
		{name: "empty", payload: ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, emulatorError([]byte(tt.payload)))
		})
	}
}
