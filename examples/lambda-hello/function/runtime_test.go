package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/functions"
)

// fakeLambda is a declared test double of the two halves of AWS Lambda that meet
// in a custom runtime (provided.al2023): the Invoke API that Cairn's invoker calls
// (POST /2015-03-31/functions/{name}/invocations) and the Runtime API that the
// function's bootstrap polls (GET …/runtime/invocation/next, POST …/response and
// …/error). AWS and LocalStack (which needs Docker) are out of reach here; with
// this double the real bootstrap binary, aws-lambda-go's runtime loop, the AWS SDK
// client and Cairn's Lambda invoker all take part. One invocation at a time.
type fakeLambda struct {
	events  chan fakeEvent
	mu      sync.Mutex
	pending map[string]chan fakeResult
	nextID  int
}

type fakeEvent struct {
	id      string
	payload []byte
}

type fakeResult struct {
	payload []byte
	failed  bool
}

func newFakeLambda() *fakeLambda {
	return &fakeLambda{events: make(chan fakeEvent), pending: map[string]chan fakeResult{}}
}

func (f *fakeLambda) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const runtimePrefix = "/2018-06-01/runtime/invocation/"
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/2015-03-31/functions/cairn-hello/invocations":
		f.invoke(w, r)
	case r.Method == http.MethodGet && r.URL.Path == runtimePrefix+"next":
		select {
		case ev := <-f.events:
			w.Header().Set("Lambda-Runtime-Aws-Request-Id", ev.id)
			w.Header().Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10))
			w.Header().Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:000000000000:function:cairn-hello")
			w.Header().Set("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000")
			_, _ = w.Write(ev.payload)
		case <-r.Context().Done():
		}
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, runtimePrefix):
		id, kind, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, runtimePrefix), "/")
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		ch := f.pending[id]
		delete(f.pending, id)
		f.mu.Unlock()
		if ch == nil {
			http.Error(w, "unknown request id", http.StatusBadRequest)
			return
		}
		ch <- fakeResult{payload: body, failed: kind == "error"}
		w.WriteHeader(http.StatusAccepted)
	default:
		w.Header().Set("X-Amzn-ErrorType", "ResourceNotFoundException")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"Type":"User","message":"Function not found"}`)
	}
}

// invoke hands the payload to the runtime and answers with its result.
func (f *fakeLambda) invoke(w http.ResponseWriter, r *http.Request) {
	payload, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	f.mu.Lock()
	f.nextID++
	id := "req-" + strconv.Itoa(f.nextID)
	ch := make(chan fakeResult, 1)
	f.pending[id] = ch
	f.mu.Unlock()
	select {
	case f.events <- fakeEvent{id: id, payload: payload}:
	case <-r.Context().Done():
		return
	}
	select {
	case res := <-ch:
		w.Header().Set("X-Amz-Executed-Version", "$LATEST")
		if res.failed {
			w.Header().Set("X-Amz-Function-Error", "Unhandled")
		}
		_, _ = w.Write(res.payload)
	case <-r.Context().Done():
	}
}

// TestBootstrapThroughInvoker builds the function as `make lambda-zip` does and
// runs it under the fake Lambda, invoked by Cairn's Lambda invoker.
func TestBootstrapThroughInvoker(t *testing.T) {
	t.Parallel()

	bin := filepath.Join(t.TempDir(), "bootstrap")
	build := exec.Command("go", "build", "-tags", "lambda.norpc", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	fake := newFakeLambda()
	server := httptest.NewServer(fake)
	t.Cleanup(server.Close)
	u, err := url.Parse(server.URL)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = []string{
		"AWS_LAMBDA_RUNTIME_API=" + u.Host,
		"AWS_LAMBDA_FUNCTION_NAME=cairn-hello",
		"AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=128",
		"AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/cairn-hello",
		"AWS_LAMBDA_LOG_STREAM_NAME=test",
		"_HANDLER=bootstrap",
	}
	cmd.Stderr = io.Discard
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})

	invoker, err := functions.NewLambda(ctx, &functions.LambdaConfig{
		Endpoint: server.URL, Region: "us-east-1", AccessKey: "test", SecretKey: "test",
	})
	require.NoError(t, err)

	tests := []struct {
		name      string
		input     string
		output    string
		retryable *bool
	}{
		{name: "greets", input: `{"name":"ada"}`, output: `{"greeting":"hello, ada"}`},
		{name: "terminal failure", input: `{"fail":"terminal"}`, retryable: new(false)},
		{name: "retryable failure", input: `{"fail":"retryable"}`, retryable: new(true)},
	}
	// In sequence: the runtime serves one invocation at a time.
	for _, tt := range tests {
		inv := &functions.Invocation{
			Envelope: functions.Envelope{RunID: "run-1", Workflow: "lambda-hello", Version: 1, Step: "hello", Attempt: 1, Input: json.RawMessage(tt.input)},
			Spec:     functions.Spec{Lambda: &functions.LambdaSpec{Function: "cairn-hello"}},
		}
		sink := &memorySink{}
		callCtx, callCancel := context.WithTimeout(ctx, 30*time.Second)
		err := invoker.Invoke(callCtx, inv, sink)
		callCancel()
		if tt.retryable == nil {
			require.NoError(t, err, tt.name)
			require.JSONEq(t, tt.output, sink.out.String(), tt.name)
			continue
		}
		var fe *functions.Error
		require.True(t, errors.As(err, &fe), "%s: want *functions.Error, got %v", tt.name, err)
		require.Equal(t, *tt.retryable, fe.Retryable, "%s: %s", tt.name, fe.Message)
		require.Equal(t, functions.CodeFunctionError, fe.Code)
	}
}

// memorySink keeps what the invoker writes; only Output matters here.
type memorySink struct {
	mu  sync.Mutex
	out strings.Builder
}

func (s *memorySink) Output() io.Writer           { return lockedWriter{s} }
func (s *memorySink) SetOutputContentType(string) {}
func (s *memorySink) Log() io.Writer              { return io.Discard }
func (s *memorySink) Progress(context.Context, json.RawMessage) error {
	return nil
}
func (s *memorySink) Checkpoint(context.Context, json.RawMessage) error { return nil }
func (s *memorySink) CheckpointFile(context.Context, *os.File) error    { return nil }

type lockedWriter struct{ s *memorySink }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	return w.s.out.Write(p)
}
