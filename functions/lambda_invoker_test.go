package functions

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/stretchr/testify/require"
)

// lambdaDouble is a declared test double of the AWS Lambda Invoke REST API
// (POST /2015-03-31/functions/{name}/invocations; X-Amz-Function-Error,
// X-Amz-Executed-Version and X-Amz-Log-Result response headers; errors as
// X-Amzn-ErrorType plus a JSON body). AWS itself is out of reach from these tests
// (no network, no account), and LocalStack needs Docker, which our machines do not
// run.
//
// What a function does (succeeds, fails for good or retryably, runs past a
// timeout, reads a large input by URL) is tested against AWS's own Runtime
// Interface Emulator running the lambda-hello example (lambda_emulator_test.go,
// internal/e2e's TestLambdaEmulator). The double stays only for what the
// emulator cannot produce: the service's own answers (throttling with
// Retry-After, a function being updated, 5xx service errors, a missing function,
// access denied, a request too large), the X-Amz-Function-Error and
// X-Amz-Log-Result headers of a real Lambda (the emulator drops every header),
// and the signed request the SDK sends (the emulator checks no signature and
// serves one function name). Each function name maps to a handler; unknown names
// answer 404 ResourceNotFoundException like Lambda does.
type lambdaDouble struct {
	server    *httptest.Server
	functions map[string]http.HandlerFunc

	mu       sync.Mutex
	requests []lambdaRequest
}

// lambdaRequest is what the double saw of one call.
type lambdaRequest struct {
	function       string
	qualifier      string
	invocationType string
	logType        string
	authorization  string
	envelope       Envelope
}

func newLambdaDouble(t *testing.T, functions map[string]http.HandlerFunc) *lambdaDouble {
	t.Helper()
	d := &lambdaDouble{functions: functions}
	d.server = httptest.NewServer(http.HandlerFunc(d.serve))
	t.Cleanup(d.server.Close)
	return d
}

func (d *lambdaDouble) serve(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutPrefix(r.URL.Path, "/2015-03-31/functions/")
	name, ok2 := strings.CutSuffix(name, "/invocations")
	if r.Method != http.MethodPost || !ok || !ok2 || name == "" {
		lambdaAPIError(w, http.StatusNotFound, "UnknownOperationException", "unknown operation "+r.Method+" "+r.URL.Path)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	req := lambdaRequest{
		function:       name,
		qualifier:      r.URL.Query().Get("Qualifier"),
		invocationType: r.Header.Get("X-Amz-Invocation-Type"),
		logType:        r.Header.Get("X-Amz-Log-Type"),
		authorization:  r.Header.Get("Authorization"),
	}
	if err := json.Unmarshal(body, &req.envelope); err != nil {
		lambdaAPIError(w, http.StatusBadRequest, "InvalidRequestContentException", "Could not parse request body into json")
		return
	}
	d.mu.Lock()
	d.requests = append(d.requests, req)
	d.mu.Unlock()
	h, ok := d.functions[name]
	if !ok {
		lambdaAPIError(w, http.StatusNotFound, "ResourceNotFoundException",
			"Function not found: arn:aws:lambda:us-east-1:000000000000:function:"+name)
		return
	}
	version := req.qualifier
	if version == "" {
		version = "$LATEST"
	}
	w.Header().Set("X-Amz-Executed-Version", version)
	w.Header().Set("Content-Type", "application/json")
	h(w, r.WithContext(context.WithValue(r.Context(), lambdaEnvelopeKey{}, req.envelope)))
}

type lambdaEnvelopeKey struct{}

// lambdaAPIError writes an error the way the Lambda service does.
func lambdaAPIError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("X-Amzn-ErrorType", code)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"Type": "User", "message": message})
}

// functionFailure writes a function error: 200 with X-Amz-Function-Error.
func functionFailure(kind, payload string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Amz-Function-Error", kind)
		_, _ = io.WriteString(w, payload)
	}
}

func (d *lambdaDouble) seen() []lambdaRequest {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]lambdaRequest(nil), d.requests...)
}

// setupLambda returns an invoker built by NewLambda against a double serving
// functions.
func setupLambda(t *testing.T, functions map[string]http.HandlerFunc) (*Lambda, *lambdaDouble) {
	t.Helper()
	d := newLambdaDouble(t, functions)
	l, err := NewLambda(context.Background(), &LambdaConfig{
		Endpoint:  d.server.URL,
		Region:    "eu-west-3",
		AccessKey: "AKIDTEST",
		SecretKey: "secret-test",
	})
	require.NoError(t, err)
	return l, d
}

func lambdaInvocation(function, qualifier string) *Invocation {
	return &Invocation{
		Envelope: Envelope{
			RunID:      "run-123",
			Workflow:   "greetings",
			Version:    2,
			Step:       "hello",
			Attempt:    1,
			Input:      json.RawMessage(`{"name":"ada"}`),
			Deps:       map[string]json.RawMessage{"big": json.RawMessage(`{"$blob":{"digest":"sha256:ab","size":9,"url":"http://s3/presigned"}}`)},
			LeaseToken: "lease-secret",
		},
		Spec: Spec{Lambda: &LambdaSpec{Function: function, Qualifier: qualifier}},
	}
}

func TestLambdaSuccess(t *testing.T) {
	t.Parallel()

	l, d := setupLambda(t, map[string]http.HandlerFunc{
		"cairn-hello": func(w http.ResponseWriter, r *http.Request) {
			env := r.Context().Value(lambdaEnvelopeKey{}).(Envelope)
			var in struct{ Name string }
			_ = json.Unmarshal(env.Input, &in)
			w.Header().Set("X-Amz-Log-Result", base64.StdEncoding.EncodeToString([]byte("START RequestId: 1\nEND RequestId: 1\n")))
			_ = json.NewEncoder(w).Encode(map[string]string{"greeting": "hello, " + in.Name})
		},
	})
	sink := &testSink{}
	require.NoError(t, l.Invoke(context.Background(), lambdaInvocation("cairn-hello", ""), sink))
	require.JSONEq(t, `{"greeting":"hello, ada"}`, sink.out.String())
	require.Equal(t, "application/json", sink.contentType)
	require.Contains(t, sink.log.String(), "START RequestId: 1")

	reqs := d.seen()
	require.Len(t, reqs, 1)
	req := reqs[0]
	require.Equal(t, "cairn-hello", req.function)
	require.Empty(t, req.qualifier)
	require.Equal(t, "RequestResponse", req.invocationType)
	require.Equal(t, "Tail", req.logType)
	require.True(t, strings.HasPrefix(req.authorization, "AWS4-HMAC-SHA256 Credential=AKIDTEST/"), req.authorization)
	require.Contains(t, req.authorization, "/eu-west-3/lambda/aws4_request")
	// The envelope arrives whole, $blob references untouched.
	require.Equal(t, "run-123", req.envelope.RunID)
	require.Equal(t, "lease-secret", req.envelope.LeaseToken)
	require.JSONEq(t, `{"$blob":{"digest":"sha256:ab","size":9,"url":"http://s3/presigned"}}`, string(req.envelope.Deps["big"]))
}

func TestLambdaQualifier(t *testing.T) {
	t.Parallel()

	l, d := setupLambda(t, map[string]http.HandlerFunc{
		"cairn-hello": func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, `"v7"`) },
	})
	sink := &testSink{}
	require.NoError(t, l.Invoke(context.Background(), lambdaInvocation("cairn-hello", "live"), sink))
	require.Equal(t, `"v7"`, sink.out.String())
	reqs := d.seen()
	require.Len(t, reqs, 1)
	require.Equal(t, "live", reqs[0].qualifier)
}

func TestLambdaFunctionError(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name      string
		kind      string
		payload   string
		retryable bool
		message   string
	}{
		{
			name:      "unhandled error is retryable",
			kind:      "Unhandled",
			payload:   `{"errorMessage":"2024-05-01T10:00:00Z Task timed out after 3.00 seconds"}`,
			retryable: true,
			message:   "lambda f: 2024-05-01T10:00:00Z Task timed out after 3.00 seconds",
		},
		{
			name:      "handled error with type is retryable",
			kind:      "Handled",
			payload:   `{"errorMessage":"upstream busy","errorType":"errorString","stackTrace":[]}`,
			retryable: true,
			message:   "lambda f: errorString: upstream busy",
		},
		{
			name:      "retryable false at the top level",
			kind:      "Handled",
			payload:   `{"errorMessage":"bad input","errorType":"ValidationError","retryable":false}`,
			retryable: false,
			message:   "lambda f: ValidationError: bad input",
		},
		{
			name:      "retryable false inside errorMessage",
			kind:      "Handled",
			payload:   `{"errorMessage":"{\"message\":\"name is required\",\"retryable\":false}","errorType":"errorString"}`,
			retryable: false,
			message:   "lambda f: errorString: name is required",
		},
		{
			name:      "retryable true inside errorMessage",
			kind:      "Handled",
			payload:   `{"errorMessage":"{\"message\":\"try later\",\"retryable\":true}"}`,
			retryable: true,
			message:   "lambda f: try later",
		},
		{
			name:      "payload that is not json",
			kind:      "Unhandled",
			payload:   `Runtime exited with error: signal: killed`,
			retryable: true,
			message:   "lambda f: Runtime exited with error: signal: killed",
		},
		{
			name:      "empty payload",
			kind:      "Unhandled",
			payload:   ``,
			retryable: true,
			message:   "lambda f: function error (Unhandled)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			l, _ := setupLambda(t, map[string]http.HandlerFunc{"f": functionFailure(tt.kind, tt.payload)})
			sink := &testSink{}
			err := l.Invoke(context.Background(), lambdaInvocation("f", ""), sink)
			var fe *Error
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.retryable, fe.Retryable)
			require.Equal(t, CodeFunctionError, fe.Code)
			require.Equal(t, tt.message, fe.Message)
			require.Empty(t, sink.out.String(), "an error payload is not the output")
		})
	}
}

func TestLambdaCallFailures(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name       string
		function   string
		handler    http.HandlerFunc
		retryable  bool
		code       string
		retryAfter time.Duration
		contains   string
	}{
		{
			name:     "throttled",
			function: "busy",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Retry-After", "7")
				lambdaAPIError(w, http.StatusTooManyRequests, "TooManyRequestsException", "Rate exceeded")
			},
			retryable:  true,
			code:       CodeHTTPStatus,
			retryAfter: 7 * time.Second,
			contains:   "lambda busy: throttled: TooManyRequestsException: Rate exceeded",
		},
		{
			name:      "not found",
			function:  "missing",
			retryable: false,
			code:      CodeInvalidSpec,
			contains:  "lambda missing: function not found: ResourceNotFoundException: Function not found",
		},
		{
			name:     "function being updated",
			function: "pending",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				lambdaAPIError(w, http.StatusConflict, "ResourceConflictException", "The function is currently in the following state: Pending")
			},
			retryable: true,
			code:      CodeHTTPStatus,
			contains:  "state: Pending",
		},
		{
			name:     "service error",
			function: "broken",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				lambdaAPIError(w, http.StatusInternalServerError, "ServiceException", "internal failure")
			},
			retryable: true,
			code:      CodeHTTPStatus,
			contains:  "lambda broken: 500 ServiceException: internal failure",
		},
		{
			name:     "invalid request",
			function: "picky",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				lambdaAPIError(w, http.StatusRequestEntityTooLarge, "RequestTooLargeException", "Request must be smaller than 6291456 bytes")
			},
			retryable: false,
			code:      CodeHTTPStatus,
			contains:  "lambda picky: 413 RequestTooLargeException",
		},
		{
			name:     "access denied",
			function: "private",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				lambdaAPIError(w, http.StatusForbidden, "AccessDeniedException", "not authorized to perform: lambda:InvokeFunction")
			},
			retryable: false,
			code:      CodeHTTPStatus,
			contains:  "403 AccessDeniedException",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			fns := map[string]http.HandlerFunc{}
			if tt.handler != nil {
				fns[tt.function] = tt.handler
			}
			l, d := setupLambda(t, fns)
			err := l.Invoke(context.Background(), lambdaInvocation(tt.function, ""), &testSink{})
			var fe *Error
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tt.retryable, fe.Retryable, fe.Message)
			require.Equal(t, tt.code, fe.Code)
			require.Equal(t, tt.retryAfter, fe.RetryAfter)
			require.Contains(t, fe.Message, tt.contains)
			require.Len(t, d.seen(), 1, "the SDK must not retry inside an attempt")
		})
	}
}

func TestLambdaNetworkError(t *testing.T) {
	t.Parallel()

	// A port that nobody listens on any more.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	l, err := NewLambda(context.Background(), &LambdaConfig{
		Endpoint: "http://" + addr, Region: "us-east-1", AccessKey: "AKIDTEST", SecretKey: "secret-test",
	})
	require.NoError(t, err)
	err = l.Invoke(context.Background(), lambdaInvocation("f", ""), &testSink{})
	var fe *Error
	require.ErrorAs(t, err, &fe)
	require.True(t, fe.Retryable)
	require.Equal(t, CodeNetwork, fe.Code)
	require.Contains(t, fe.Message, "lambda f: ")
}

// fakeLambdaClient is an injected LambdaConfig.Client.
type fakeLambdaClient struct {
	in  *lambda.InvokeInput
	out *lambda.InvokeOutput
	err error
}

func (f *fakeLambdaClient) Invoke(_ context.Context, in *lambda.InvokeInput, _ ...func(*lambda.Options)) (*lambda.InvokeOutput, error) {
	f.in = in
	return f.out, f.err
}

func TestLambdaInjectedClient(t *testing.T) {
	t.Parallel()

	fake := &fakeLambdaClient{out: &lambda.InvokeOutput{StatusCode: 200, Payload: []byte(`{"n":1}`)}}
	// The other fields are ignored when Client is set: no region needed.
	l, err := NewLambda(context.Background(), &LambdaConfig{Client: fake, Endpoint: "::bad"})
	require.NoError(t, err)
	sink := &testSink{}
	require.NoError(t, l.Invoke(context.Background(), lambdaInvocation("arn:aws:lambda:us-east-1:000000000000:function:f", "3"), sink))
	require.Equal(t, `{"n":1}`, sink.out.String())
	require.Equal(t, "arn:aws:lambda:us-east-1:000000000000:function:f", aws.ToString(fake.in.FunctionName))
	require.Equal(t, "3", aws.ToString(fake.in.Qualifier))
	var env Envelope
	require.NoError(t, json.Unmarshal(fake.in.Payload, &env))
	require.Equal(t, "hello", env.Step)
}

func TestLambdaInvalidSpec(t *testing.T) {
	t.Parallel()

	l, err := NewLambda(context.Background(), &LambdaConfig{Client: &fakeLambdaClient{}})
	require.NoError(t, err)
	for _, spec := range []Spec{{}, {Lambda: &LambdaSpec{}}} {
		err := l.Invoke(context.Background(), &Invocation{Spec: spec}, &testSink{})
		var fe *Error
		require.ErrorAs(t, err, &fe)
		require.False(t, fe.Retryable)
		require.Equal(t, CodeInvalidSpec, fe.Code)
	}
}

func TestNewLambdaConfigErrors(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		cfg  LambdaConfig
		want string
	}{
		{name: "secret without access key", cfg: LambdaConfig{Region: "us-east-1", SecretKey: "s"}, want: "access key and secret key go together"},
		{name: "access key without secret", cfg: LambdaConfig{Region: "us-east-1", AccessKey: "a"}, want: "access key and secret key go together"},
		{name: "relative endpoint", cfg: LambdaConfig{Region: "us-east-1", Endpoint: "localstack:4566"}, want: "must be an absolute http or https URL"},
		{name: "ftp endpoint", cfg: LambdaConfig{Region: "us-east-1", Endpoint: "ftp://localstack:4566"}, want: "must be an absolute http or https URL"},
		{name: "emulator without endpoint", cfg: LambdaConfig{Emulator: true}, want: "the emulator needs an endpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewLambda(context.Background(), &tt.cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestTruncateUTF8(t *testing.T) {
	t.Parallel()

	require.Equal(t, "abc", truncateUTF8("abc", 3))
	require.Equal(t, "ab…", truncateUTF8("abc", 2))
	// "é" is two bytes: never cut in the middle.
	require.Equal(t, "a…", truncateUTF8("aéb", 2))
	require.Equal(t, "a\uFFFDb", truncateUTF8("a\xffb", 10))
}

// TestLambdaConfigLoadedAtFirstInvoke: with the region given, NewLambda loads no
// AWS configuration, so a server that runs no lambda step neither pays for it
// nor fails to start over it; a configuration that cannot be loaded fails each
// attempt as an infrastructure error (not a function's *Error) naming why, and
// the next attempt loads it again. Not parallel: it sets AWS_CA_BUNDLE.
func TestLambdaConfigLoadedAtFirstInvoke(t *testing.T) {
	d := newLambdaDouble(t, map[string]http.HandlerFunc{
		"f": func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(`"ok"`)) },
	})
	t.Setenv("AWS_CA_BUNDLE", filepath.Join(t.TempDir(), "missing.pem"))
	l, err := NewLambda(context.Background(), &LambdaConfig{
		Endpoint: d.server.URL, Region: "eu-west-3", AccessKey: "AKIDTEST", SecretKey: "secret-test",
	})
	require.NoError(t, err, "the configuration is not loaded yet")
	for range 2 {
		err = l.Invoke(context.Background(), lambdaInvocation("f", ""), &testSink{})
		require.ErrorContains(t, err, "load aws config")
		var fe *Error
		require.False(t, errors.As(err, &fe), "an infrastructure error, not the function's: %v", err)
	}
	require.Empty(t, d.seen())

	t.Setenv("AWS_CA_BUNDLE", "")
	sink := &testSink{}
	require.NoError(t, l.Invoke(context.Background(), lambdaInvocation("f", ""), sink))
	require.Equal(t, `"ok"`, sink.out.String())
}
