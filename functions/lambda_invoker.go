package functions

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// lambdaMessageLimit bounds the part of a function error's message that goes into
// an *Error (stack traces and dumped payloads can be large).
const lambdaMessageLimit = 4 << 10

// LambdaAPI is the one method of *lambda.Client that the Lambda invoker calls; a
// *lambda.Client satisfies it. It exists so that LambdaConfig.Client can take a
// client built elsewhere (shared, instrumented, or a test double).
type LambdaAPI interface {
	Invoke(ctx context.Context, in *lambda.InvokeInput, optFns ...func(*lambda.Options)) (*lambda.InvokeOutput, error)
}

var _ LambdaAPI = (*lambda.Client)(nil)

// LambdaConfig configures a Lambda invoker. Every field is optional: the zero
// value uses the default AWS configuration chain (environment, shared config and
// credentials files, container and instance roles).
type LambdaConfig struct {
	// Endpoint is the Lambda API's base URL, "http://localstack:4566" say.
	// Default: the SDK's endpoint resolution (AWS_ENDPOINT_URL_LAMBDA,
	// AWS_ENDPOINT_URL, then the public AWS endpoint of Region).
	Endpoint string
	// Region is the AWS region. Default: the SDK's chain (AWS_REGION, the shared
	// config file's profile); NewLambda fails when neither gives one.
	Region string
	// AccessKey, SecretKey and SessionToken are static credentials. When AccessKey
	// is empty the SDK's default credential chain is used; when it is set,
	// SecretKey is required. SessionToken is optional (temporary credentials).
	AccessKey    string
	SecretKey    string
	SessionToken string
	// Emulator says that Endpoint is AWS's Lambda Runtime Interface Emulator
	// (aws-lambda-rie), to run functions locally without an AWS account. The
	// emulator runs one function, under the name "function", one invocation at
	// a time, and answers every invocation with 200 and no X-Amz-Function-Error.
	// So, when set: every step's function is invoked as "function", without its
	// qualifier; a response payload that is a runtime's error object (see
	// emulatorError) or the emulator's own timeout answer is a function error;
	// and Region and the credentials default to "us-east-1" and anonymous, as the
	// emulator checks neither. It requires Endpoint. Default false.
	Emulator bool
	// Client, when set, is used as is and every field above but Emulator is
	// ignored: the caller configured it. Its retries, if any, happen inside one
	// attempt.
	Client LambdaAPI
	// Logger receives the invoker's diagnostics. Default: discard.
	Logger *slog.Logger
}

// Lambda runs lambda steps: a synchronous (RequestResponse) Invoke of
// LambdaSpec.Function, with LambdaSpec.Qualifier (a version or alias) when set
// (docs/functions.md, "lambda").
//
// The payload is the envelope as JSON; inputs and upstream outputs over the
// inline limit already arrive as {"$blob": {"url": …}} references (presigned
// GETs), put there by the dispatcher. Lambda caps a synchronous payload at 6 MB
// each way: a larger request is refused by Lambda (a terminal failure).
//
// Success: the response payload is the output, written to Sink.Output with the
// content type application/json. The tail of the execution log that Lambda
// returns (LogType Tail, up to 4 KB) goes to Sink.Log.
//
// A function error (X-Amz-Function-Error set, whether "Handled" or "Unhandled")
// is an *Error with CodeFunctionError whose message comes from the payload's
// errorType and errorMessage. It is retryable unless the payload says
// "retryable": false, either at its top level or inside errorMessage when that
// is itself a JSON object (what a Go handler returning an error whose text is
// {"message": "…", "retryable": false} produces).
//
// Failures of the call itself: throttling (429, TooManyRequestsException, its
// Retry-After honoured), ResourceConflictException (the function is being
// created or updated), 5xx and network errors are retryable *Errors; other 4xx
// answers (ResourceNotFoundException, invalid requests, access denied) are
// terminal. The SDK's own retries are turned off on clients NewLambda builds:
// one Invoke is one attempt, and the step's retry policy decides what follows.
//
// Against the Runtime Interface Emulator (LambdaConfig.Emulator) function errors
// are read off the payload instead; see LambdaConfig.Emulator.
//
// Lambda is safe for concurrent use.
type Lambda struct {
	logger   *slog.Logger
	emulator bool

	mu     sync.Mutex
	client LambdaAPI
	// connect builds client at the first Invoke (NewLambda); nil once it has.
	connect func(context.Context) (LambdaAPI, error)
}

// NewLambda returns a Lambda invoker configured by cfg (nil means defaults).
// Without cfg.Client it loads the AWS configuration, which reads the environment
// and the shared config files but makes no network call; it fails when cfg is
// invalid (secret key without access key or the reverse, an endpoint that is
// not an absolute http or https URL, Emulator without an endpoint) or when no
// region can be found. When the region is given (cfg.Region, or Emulator), the
// configuration is loaded at the first Invoke instead: loading it runs much of
// the AWS SDK (about 6 MiB of the binary's pages mapped into a server that may
// never run a lambda step: bench/results/large-output-write-once.md), and an
// error then fails that attempt as an infrastructure error, tried again.
func NewLambda(ctx context.Context, cfg *LambdaConfig) (*Lambda, error) {
	if cfg == nil {
		cfg = &LambdaConfig{}
	}
	l := &Lambda{
		client:   cfg.Client,
		logger:   loggerOrDiscard(cfg.Logger).With("component", "lambda_invoker"),
		emulator: cfg.Emulator,
	}
	if l.client != nil {
		return l, nil
	}
	if cfg.Emulator && cfg.Endpoint == "" {
		return nil, errors.New("new lambda invoker: the emulator needs an endpoint")
	}
	if (cfg.AccessKey == "") != (cfg.SecretKey == "") {
		return nil, errors.New("new lambda invoker: access key and secret key go together")
	}
	if cfg.Endpoint != "" {
		u, err := url.Parse(cfg.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("new lambda invoker: endpoint %q must be an absolute http or https URL", cfg.Endpoint)
		}
	}
	var opts []func(*config.LoadOptions) error
	switch {
	case cfg.Region != "":
		opts = append(opts, config.WithRegion(cfg.Region))
	case cfg.Emulator:
		opts = append(opts, config.WithRegion("us-east-1"))
	}
	switch {
	case cfg.AccessKey != "":
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken)))
	case cfg.Emulator:
		// Unsigned requests: the default chain would look for an instance role.
		opts = append(opts, config.WithCredentialsProvider(aws.AnonymousCredentials{}))
	}
	endpoint := cfg.Endpoint
	connect := func(ctx context.Context) (LambdaAPI, error) {
		awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("load aws config: %w", err)
		}
		if awsCfg.Region == "" {
			return nil, errors.New("no region: set LambdaConfig.Region or AWS_REGION")
		}
		return lambda.NewFromConfig(awsCfg, func(o *lambda.Options) {
			if endpoint != "" {
				o.BaseEndpoint = aws.String(endpoint)
			}
			// Cairn's retry policy owns retries; see Lambda.
			o.Retryer = aws.NopRetryer{}
		}), nil
	}
	if cfg.Region != "" || cfg.Emulator {
		l.connect = connect
		return l, nil
	}
	client, err := connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("new lambda invoker: %w", err)
	}
	l.client = client
	return l, nil
}

// lambdaClient returns the client, built at the first call when NewLambda
// left it to then; a failed build is tried again at the next call.
func (l *Lambda) lambdaClient(ctx context.Context) (LambdaAPI, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.client == nil {
		client, err := l.connect(ctx)
		if err != nil {
			return nil, err
		}
		l.client, l.connect = client, nil
	}
	return l.client, nil
}

// Invoke runs one attempt of a lambda step; see Lambda for the protocol. It
// returns nil on success, an *Error when the function failed, Lambda refused the
// call or the spec is unusable (CodeInvalidSpec), context.Cause(ctx) when ctx
// ended first, and any other error for an infrastructure failure.
func (l *Lambda) Invoke(ctx context.Context, inv *Invocation, sink Sink) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	spec := inv.Spec.Lambda
	if spec == nil || spec.Function == "" {
		return invalidSpecf("lambda: step has no lambda function")
	}
	function, qualifier := spec.Function, spec.Qualifier
	if l.emulator {
		function, qualifier = emulatorFunction, ""
	}
	where := spec.Function
	if spec.Qualifier != "" {
		where += ":" + spec.Qualifier
	}
	payload, err := json.Marshal(inv.Envelope)
	if err != nil {
		return fmt.Errorf("lambda: encode envelope: %w", err)
	}
	in := &lambda.InvokeInput{
		FunctionName:   aws.String(function),
		InvocationType: types.InvocationTypeRequestResponse,
		LogType:        types.LogTypeTail,
		Payload:        payload,
	}
	if qualifier != "" {
		in.Qualifier = aws.String(qualifier)
	}
	env := &inv.Envelope
	logger := l.logger.With("run_id", env.RunID, "step", env.Step, "attempt", env.Attempt)

	client, err := l.lambdaClient(ctx)
	if err != nil {
		return fmt.Errorf("lambda: %w", err)
	}
	out, err := client.Invoke(ctx, in)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return invokeError(where, err)
	}
	logger.DebugContext(ctx, "lambda function returned", "function", where,
		"executed_version", aws.ToString(out.ExecutedVersion), "function_error", aws.ToString(out.FunctionError))
	if tail := decodeLogTail(out.LogResult); len(tail) > 0 {
		// The log is a diagnostic: losing it must not fail the attempt.
		if _, err := sink.Log().Write(tail); err != nil {
			logger.DebugContext(ctx, "write lambda log tail", "error", err)
		}
	}
	if out.FunctionError != nil {
		return functionError(where, aws.ToString(out.FunctionError), out.Payload)
	}
	if l.emulator && emulatorError(out.Payload) {
		return functionError(where, "Unhandled", out.Payload)
	}
	sink.SetOutputContentType("application/json")
	if len(out.Payload) == 0 {
		return nil
	}
	if _, err := sink.Output().Write(out.Payload); err != nil {
		return sinkWriteError("lambda: write output", err)
	}
	return nil
}

// emulatorFunction is the one function name the Runtime Interface Emulator
// serves (POST /2015-03-31/functions/function/invocations).
const emulatorFunction = "function"

// emulatorTimeoutPrefix starts the emulator's answer when a function runs past
// its timeout (AWS_LAMBDA_FUNCTION_TIMEOUT): "Task timed out after 3.00
// seconds", as text, with status 200.
const emulatorTimeoutPrefix = "Task timed out after "

// emulatorErrorKeys are the fields of the error objects that Lambda runtimes
// return for a function error: errorMessage and errorType from every runtime,
// stackTrace (Go, Java, Python), trace (Node.js), requestId (Python), cause
// (Java), and Cairn's own retryable.
var emulatorErrorKeys = map[string]bool{
	"errorMessage": true, "errorType": true, "stackTrace": true, "trace": true,
	"requestId": true, "cause": true, "retryable": true,
}

// emulatorError reports whether a payload that the Runtime Interface Emulator
// answered with 200 is a function error: the emulator drops the
// X-Amz-Function-Error header that Lambda sends, so, like AWS SAM's local
// Lambda endpoint, it is read off the payload: a JSON object with a string
// errorMessage and errorType and no other field than a runtime's error object
// has (emulatorErrorKeys), or the emulator's timeout text. A function whose
// successful output has exactly that shape is misread: only under the emulator.
func emulatorError(payload []byte) bool {
	if bytes.HasPrefix(payload, []byte(emulatorTimeoutPrefix)) {
		return true
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(payload, &obj) != nil {
		return false
	}
	for k := range obj {
		if !emulatorErrorKeys[k] {
			return false
		}
	}
	isString := func(v json.RawMessage) bool { return len(v) > 0 && v[0] == '"' }
	return isString(obj["errorMessage"]) && isString(obj["errorType"])
}

// invokeError turns a failed Invoke call (not a function error) into an *Error.
func invokeError(where string, err error) *Error {
	prefix := "lambda " + where + ": "
	var throttled *types.TooManyRequestsException
	if errors.As(err, &throttled) {
		return &Error{
			Message:    prefix + "throttled: " + apiErrorText(throttled),
			Retryable:  true,
			RetryAfter: parseRetryAfter(aws.ToString(throttled.RetryAfterSeconds), time.Now()),
			Code:       CodeHTTPStatus,
		}
	}
	var notFound *types.ResourceNotFoundException
	if errors.As(err, &notFound) {
		return invalidSpecf("%sfunction not found: %s", prefix, apiErrorText(notFound))
	}
	// A function that is being created or updated (state Pending, update
	// InProgress) answers 409 for a while: worth another attempt.
	var conflict *types.ResourceConflictException
	if errors.As(err, &conflict) {
		return &Error{Message: prefix + apiErrorText(conflict), Retryable: true, Code: CodeHTTPStatus}
	}
	var apiErr smithy.APIError
	var status interface{ HTTPStatusCode() int }
	if errors.As(err, &status) && status.HTTPStatusCode() > 0 {
		code := status.HTTPStatusCode()
		text := http.StatusText(code)
		if errors.As(err, &apiErr) {
			text = apiErrorText(apiErr)
		}
		return &Error{
			Message:   fmt.Sprintf("%s%d %s", prefix, code, text),
			Retryable: code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500,
			Code:      CodeHTTPStatus,
		}
	}
	var sendErr *smithyhttp.RequestSendError
	var deserErr *smithy.DeserializationError
	if errors.As(err, &sendErr) || errors.As(err, &deserErr) {
		return &Error{Message: prefix + transportCause(err).Error(), Retryable: true, Code: CodeNetwork}
	}
	// Anything else (credentials that cannot be had, say) failed before Lambda
	// saw the call: retryable, as a configuration may be fixed meanwhile.
	return &Error{Message: prefix + err.Error(), Retryable: true, Code: CodeFailed}
}

// apiErrorText is an API error's code and message, "ResourceNotFoundException:
// Function not found: …".
func apiErrorText(e smithy.APIError) string {
	if msg := e.ErrorMessage(); msg != "" {
		return e.ErrorCode() + ": " + msg
	}
	return e.ErrorCode()
}

// transportCause unwraps the SDK's layers (operation error, send error,
// url.Error) down to the transport's own error ("dial tcp 10.0.0.1:4566:
// connect: connection refused").
func transportCause(err error) error {
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return urlErr.Err
	}
	var sendErr *smithyhttp.RequestSendError
	if errors.As(err, &sendErr) && sendErr.Err != nil {
		return sendErr.Err
	}
	return err
}

// lambdaErrorPayload is what Lambda runtimes return for a function error:
// {"errorMessage": "…", "errorType": "…", "stackTrace": […]}, plus the optional
// top-level "retryable" Cairn understands.
type lambdaErrorPayload struct {
	ErrorMessage *string `json:"errorMessage"`
	ErrorType    string  `json:"errorType"`
	Message      *string `json:"message"`
	Retryable    *bool   `json:"retryable"`
	Code         string  `json:"code"`
}

// functionError turns a function error's payload into an *Error (see Lambda).
func functionError(where, kind string, payload []byte) *Error {
	e := &Error{Retryable: true, Code: CodeFunctionError}
	var p lambdaErrorPayload
	msg := ""
	if err := json.Unmarshal(payload, &p); err == nil {
		if p.Retryable != nil && !*p.Retryable {
			e.Retryable = false
		}
		switch {
		case p.ErrorMessage != nil:
			msg = *p.ErrorMessage
			// errorMessage may itself be a JSON object (a Go handler's error text).
			var inner lambdaErrorPayload
			if trimmed := strings.TrimSpace(msg); strings.HasPrefix(trimmed, "{") && json.Unmarshal([]byte(trimmed), &inner) == nil {
				if inner.Retryable != nil && !*inner.Retryable {
					e.Retryable = false
				}
				if inner.Message != nil {
					msg = *inner.Message
				}
				e.HandlerCode = handlerCode(inner.Code)
			}
		case p.Message != nil:
			msg = *p.Message
		}
		if p.ErrorType != "" {
			if msg == "" {
				msg = p.ErrorType
			} else {
				msg = p.ErrorType + ": " + msg
			}
		}
	} else {
		msg = strings.TrimSpace(string(payload))
	}
	if msg == "" {
		msg = "function error (" + kind + ")"
	}
	e.Message = "lambda " + where + ": " + truncateUTF8(msg, lambdaMessageLimit)
	return e
}

// truncateUTF8 cuts s to at most n bytes, on a rune boundary, marking the cut,
// and replaces invalid UTF-8.
func truncateUTF8(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// decodeLogTail decodes X-Amz-Log-Result (base64); nil when absent or malformed.
func decodeLogTail(v *string) []byte {
	if v == nil || *v == "" {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(*v)
	if err != nil {
		return nil
	}
	return b
}
