// Package functions holds the invoker interface and its kinds (builtin, exec,
// http, lambda): what runs one attempt of a step and streams its
// output, checkpoints and log to the dispatcher.
//
// An invoker is told what to run (Invocation) and where to put what comes out (Sink).
// It never touches the catalog or the blob store: the dispatcher's Sink does. Every
// invoker honours ctx: when it ends the handler is stopped (for exec, the whole
// process group is killed) and Invoke returns promptly.
package functions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/fn"
)

// Envelope is the JSON document every handler receives (docs/functions.md):
// the Go function SDK's type (fn.Envelope), so that the server and the SDK read
// and write one definition.
type Envelope = fn.Envelope

// BlobRef is the body of a {"$blob": …} reference to a large value: its digest,
// size and content type, and where the handler reads it (Path for exec, URL for
// http and lambda). Its home is blobstore.Ref.
type BlobRef = blobstore.Ref

// Spec says what to run: exactly one of the kinds is set.
type Spec struct {
	// Exec is argv of a program inside the bundle, relative to its root.
	Exec []string `json:"exec,omitempty"`
	// HTTP is an endpoint to POST the envelope to.
	HTTP *HTTPSpec `json:"http,omitempty"`
	// Lambda is an AWS Lambda function to invoke.
	Lambda *LambdaSpec `json:"lambda,omitempty"`
	// Builtin names a built-in: noop, echo, sleep, fail.
	Builtin string `json:"builtin,omitempty"`
	// NoNetwork runs an exec handler without any network (manifest: network: none).
	NoNetwork bool `json:"no_network,omitempty"`
	// AllowPorts lists the ports of the server's host a sandboxed exec handler
	// may reach on its loopback (manifest: network: {allow: ["localhost:5432"]}),
	// at the same port of its own loopback. Other kinds ignore it.
	AllowPorts []int `json:"allow_ports,omitempty"`
	// Env holds "NAME=value" entries added to an exec handler's environment (the
	// step's env, secrets resolved). They override PATH, HOME, LANG, TMPDIR and
	// ExecConfig.ExtraEnv but never the CAIRN_* variables. Other kinds ignore it.
	Env []string `json:"-"`
	// Resources bounds an exec handler (see Resources); nil: unbounded.
	Resources *Resources `json:"resources,omitempty"`
}

// HTTPSpec is the http kind's target.
type HTTPSpec struct {
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
}

// LambdaSpec is the lambda kind's target.
type LambdaSpec struct {
	Function  string `json:"function"`
	Qualifier string `json:"qualifier,omitempty"`
}

// Invocation is one attempt of one step.
type Invocation struct {
	Envelope Envelope
	Spec     Spec
	// BundleDir is the extracted, read-only bundle of the run's version (exec).
	BundleDir string
	// Timeout is the step's timeout; the caller also puts it on ctx. Informational
	// for invokers that pass deadlines on (HTTP headers, Lambda).
	Timeout time.Duration
	// Secrets are the secret values in Spec (Env, HTTP headers) and the
	// attempt's credentials in Envelope (the callback URL's token, the lease
	// credential). Invokers do not read it: the caller masks them in what the
	// handler produces (NewMasker).
	Secrets []string
	// Started, when set, is called once the handler's process has started (exec);
	// the dispatcher measures how long attempts take to start (admission). Other
	// invokers do not call it.
	Started func()
}

// Sink receives what a handler produces. The dispatcher implements it; invokers call
// it from one goroutine at a time per stream, but Output and Log may be written
// concurrently with each other and with the checkpoint methods.
type Sink interface {
	// Output receives the handler's output bytes, streamed. Set the content type
	// first with SetOutputContentType if the handler declares one.
	Output() io.Writer
	// SetOutputContentType records the output's media type (http Content-Type).
	SetOutputContentType(ct string)
	// Log receives the handler's log (exec stderr).
	Log() io.Writer
	// Checkpoint stores a checkpoint given inline (JSON). It fails with an error
	// wrapping ErrLeaseLost when the attempt no longer holds its lease.
	Checkpoint(ctx context.Context, value json.RawMessage) error
	// CheckpointFile stores the content of a file, open for reading at its start,
	// as a checkpoint. The file is read before the call returns; the invoker closes
	// it (exec removes the attempt's TMPDIR when the attempt ends).
	CheckpointFile(ctx context.Context, f *os.File) error
	// Progress records a progress report (JSON) as an event.
	Progress(ctx context.Context, value json.RawMessage) error
}

// Invoker runs attempts of one kind. Implementations are safe for concurrent use.
type Invoker interface {
	// Invoke runs one attempt. It returns nil when the handler succeeded (its output
	// was written to sink.Output()), an *Error when the handler failed, or ctx's error
	// when ctx ended first (context.Cause(ctx): the caller tells timeout from cancel
	// by the cause). When a Sink method fails with an error wrapping ErrLeaseLost,
	// the handler is stopped and that error is returned. Any other error is an
	// infrastructure failure (retryable). Output written before a failure is not
	// the step's output: the caller discards it.
	Invoke(ctx context.Context, inv *Invocation, sink Sink) error
}

// ErrLeaseLost is what Sink methods wrap when the attempt's lease is gone.
var ErrLeaseLost = errors.New("lease lost")

// Error is a handler's failure.
type Error struct {
	// Message says what failed, for the attempt's record and the user.
	Message string `json:"message"`
	// Retryable is false for failures that must not be retried (terminal).
	Retryable bool `json:"retryable"`
	// RetryAfter, when > 0, is the earliest retry the function asked for (HTTP
	// Retry-After); the retry policy's delay is used when larger.
	RetryAfter time.Duration `json:"-"`
	// Code is a short machine-readable class, one of the Code* constants:
	// "exit_status", "signal", "http_status", "network", "function_error",
	// "protocol", "invalid_spec", "blob_missing", "kind_unavailable",
	// "bundle_install", "isolation_unavailable", "failed".
	Code string `json:"code,omitempty"`
	// HandlerCode is the code the handler gave its own failure (an SDK's
	// terminal or retryable code, e.g. "card_declined"), beside Cairn's Code.
	HandlerCode string `json:"handler_code,omitempty"`
}

// handlerCodeLimit bounds a handler's code: a class, not a message.
const handlerCodeLimit = 64

// handlerCode is a handler's failure code as recorded: valid UTF-8, at most
// handlerCodeLimit bytes, "" when it has none.
func handlerCode(code string) string {
	return truncateUTF8(strings.TrimSpace(strings.ToValidUTF8(code, "")), handlerCodeLimit)
}

// Values of Error.Code.
const (
	// CodeFailed is a generic failure (Failf, Terminalf, the fail built-in).
	CodeFailed = "failed"
	// CodeExitStatus is an exec handler that exited with a non-zero status.
	CodeExitStatus = "exit_status"
	// CodeSignal is an exec handler killed by a signal it was not sent by Cairn.
	CodeSignal = "signal"
	// CodeHTTPStatus is an http function that answered with a non-2xx status.
	CodeHTTPStatus = "http_status"
	// CodeNetwork is an http function that could not be reached or whose
	// response broke off.
	CodeNetwork = "network"
	// CodeFunctionError is a failure the handler reported itself (exec control
	// message, lambda function error).
	CodeFunctionError = "function_error"
	// CodeProtocol is a handler that broke the function protocol.
	CodeProtocol = "protocol"
	// CodeInvalidSpec is a step whose function cannot be run at all: unknown
	// built-in, program missing from the bundle or leaving it, bad URL, bad params.
	// Always terminal.
	CodeInvalidSpec = "invalid_spec"
	// CodeBlobMissing is an input or checkpoint whose $blob reference names an
	// object the blob store does not have (lost or deleted). Always terminal:
	// retrying cannot bring it back.
	CodeBlobMissing = "blob_missing"
	// CodeKindUnavailable is a step of a kind this server cannot run (no Lambda
	// configured). Retryable: a retry may land on another server; the step's retry
	// policy bounds it.
	CodeKindUnavailable = "kind_unavailable"
	// CodeBundleInstall is a bundle this server cannot install in its cache
	// directory (no permission, read-only file system). Retryable and bounded like
	// CodeKindUnavailable; the server's log and /readyz say more.
	CodeBundleInstall = "bundle_install"
	// CodeSecretNotFound is a step whose env or headers reference a secret that
	// does not exist, or that cannot be opened (no CAIRN_SECRET_KEY on this
	// server, a key it does not have). Always terminal.
	CodeSecretNotFound = "secret_not_found"
	// CodeResourceExhausted is an exec handler that ran out of the memory its
	// step's resources allow. Terminal: the same input under the same limit
	// would run out again.
	CodeResourceExhausted = "resource_exhausted"
)

// Error returns the message and whether the failure is retryable or terminal.
func (e *Error) Error() string {
	kind := "retryable"
	if !e.Retryable {
		kind = "terminal"
	}
	return fmt.Sprintf("%s (%s)", e.Message, kind)
}

// Failf returns a retryable *Error.
func Failf(format string, args ...any) *Error {
	return &Error{Message: fmt.Sprintf(format, args...), Retryable: true, Code: CodeFailed}
}

// Terminalf returns a terminal *Error.
func Terminalf(format string, args ...any) *Error {
	return &Error{Message: fmt.Sprintf(format, args...), Retryable: false, Code: CodeFailed}
}

// invalidSpecf returns a terminal *Error with CodeInvalidSpec.
func invalidSpecf(format string, args ...any) *Error {
	return &Error{Message: fmt.Sprintf(format, args...), Retryable: false, Code: CodeInvalidSpec}
}

// sinkWriteError turns a failed write to the sink's output into Invoke's result:
// a lease loss or an *Error (say, an output limit) passes through unchanged so the
// caller sees it with errors.Is/As; anything else is an infrastructure failure.
func sinkWriteError(op string, err error) error {
	var fnErr *Error
	if errors.Is(err, ErrLeaseLost) || errors.As(err, &fnErr) {
		return err
	}
	return fmt.Errorf("%s: %w", op, err)
}

// loggerOrDiscard returns l, or a logger that drops everything when l is nil
// (packages never fall back to slog.Default()).
func loggerOrDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}
