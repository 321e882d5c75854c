package fn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// Envelope is the JSON document Cairn sends every attempt (docs/functions.md,
// "The envelope"): the server encodes this type (functions.Envelope is it), and
// Call reads it for the handler.
type Envelope struct {
	RunID    string `json:"run_id"`
	Workflow string `json:"workflow"`
	Version  int    `json:"version"`
	Step     string `json:"step"`
	Attempt  int    `json:"attempt"`
	// Input is the run's input (JSON null when none).
	Input json.RawMessage `json:"input"`
	// Params are the step's static `with` parameters (JSON null when none).
	Params json.RawMessage `json:"params"`
	// Deps maps each upstream step key to its output: the value inline, or a
	// {"$blob": {...}} reference (Blob) for outputs over the inline limit.
	Deps map[string]json.RawMessage `json:"deps"`
	// Checkpoint is the newest checkpoint of an earlier attempt, or null.
	Checkpoint json.RawMessage `json:"checkpoint"`
	// LeaseToken is the attempt's fencing token; http and lambda functions present
	// it as the bearer credential of PUT .../checkpoint. Empty for exec.
	LeaseToken string `json:"lease_token,omitempty"`
	// CheckpointURL is where an http or lambda function may PUT checkpoints.
	CheckpointURL string `json:"checkpoint_url,omitempty"`
	// CallbackURL is where a third party POSTs the result of work this attempt
	// started, after the function answered {"$suspend": …} (Call.Suspend); empty
	// when the server has no signing key.
	CallbackURL string `json:"callback_url,omitempty"`
	// Failure is set for a failure handler (a compensation or an on_failure
	// step): the run's error, the steps that failed ({key, error}) and the
	// compensations so far ({key, compensates, status, error}).
	Failure json.RawMessage `json:"failure,omitempty"`
	// Item and Index are a map instance's item (as it was in the list) and its
	// index in the list, from 0; absent for other steps.
	Item  json.RawMessage `json:"item,omitempty"`
	Index *int64          `json:"index,omitempty"`
	// Traceparent is the W3C trace context of the attempt's invoke span when the
	// server traces (OTEL_* set): a function that traces joins the run's trace.
	// Also sent as the traceparent header (http) and the TRACEPARENT variable (exec).
	Traceparent string `json:"traceparent,omitempty"`
}

// Kind is how a handler was called: "exec", "http" or "lambda".
type Kind string

// The kinds a handler serves.
const (
	KindExec   Kind = "exec"
	KindHTTP   Kind = "http"
	KindLambda Kind = "lambda"
)

// Handler runs one attempt of a step. Its first result is the step's output
// (see the package documentation); a non-nil error fails the attempt.
type Handler func(ctx context.Context, c *Call) (any, error)

// Typed adapts a handler of a typed input and output: the run's input is
// decoded into In (a decoding failure is a terminal error, code "bad_input").
func Typed[In, Out any](f func(ctx context.Context, c *Call, in In) (Out, error)) Handler {
	return func(ctx context.Context, c *Call) (any, error) {
		var in In
		if err := c.Input(&in); err != nil {
			return nil, Terminal("bad_input", "decode the input: %v", err)
		}
		return f(ctx, c, in)
	}
}

// Call is one attempt of a step, as its handler sees it. Its methods are safe
// for concurrent use.
type Call struct {
	env    Envelope
	kind   Kind
	ch     channel
	logger *slog.Logger

	mu        sync.Mutex
	suspended *suspension
}

// channel is how a call talks back to Cairn while it runs: fd 3 for exec, the
// checkpoint URL for http and lambda.
type channel interface {
	checkpoint(ctx context.Context, value []byte) error
	progress(ctx context.Context, value []byte) error
}

// suspension is a $suspend the handler asked for.
type suspension struct {
	Timeout   string `json:"timeout,omitempty"`
	OnTimeout string `json:"on_timeout,omitempty"`
}

func newCall(env Envelope, kind Kind, ch channel, logger *slog.Logger) *Call {
	return &Call{
		env:    env,
		kind:   kind,
		ch:     ch,
		logger: logger.With("run_id", env.RunID, "step", env.Step, "attempt", env.Attempt),
	}
}

// Envelope returns the envelope as Cairn sent it.
func (c *Call) Envelope() Envelope { return c.env }

// Kind is how the handler was called.
func (c *Call) Kind() Kind { return c.kind }

// RunID is the run's ID.
func (c *Call) RunID() string { return c.env.RunID }

// Workflow and Version name the run's workflow version.
func (c *Call) Workflow() string { return c.env.Workflow }

// Version is the run's workflow version.
func (c *Call) Version() int { return c.env.Version }

// Step is the step's key.
func (c *Call) Step() string { return c.env.Step }

// Attempt is the attempt's number, 1 for the first.
func (c *Call) Attempt() int { return c.env.Attempt }

// IdempotencyKey is "<run_id>/<step>": the same on every attempt of the step.
// A handler runs at least once; key its side effects with it.
func (c *Call) IdempotencyKey() string { return c.env.RunID + "/" + c.env.Step }

// Traceparent is the W3C trace context of the attempt's invoke span, or ""
// when the server does not trace.
func (c *Call) Traceparent() string { return c.env.Traceparent }

// Logger logs to the attempt's log (exec: stderr, which Cairn keeps; http and
// lambda: the process's stderr), with run_id, step and attempt.
func (c *Call) Logger() *slog.Logger { return c.logger }

// Logf writes one line to the attempt's log.
func (c *Call) Logf(format string, args ...any) { c.logger.Info(fmt.Sprintf(format, args...)) }

// Input decodes the run's input into v ($blob references are read from their
// file or URL).
func (c *Call) Input(v any) error { return c.decode(context.Background(), "input", c.env.Input, v) }

// Params decodes the step's `with` parameters into v.
func (c *Call) Params(v any) error { return c.decode(context.Background(), "params", c.env.Params, v) }

// Item decodes a map instance's item into v; Index is its index.
func (c *Call) Item(v any) error { return c.decode(context.Background(), "item", c.env.Item, v) }

// Index is a map instance's index in its list, and whether the step is one.
func (c *Call) Index() (int64, bool) {
	if c.env.Index == nil {
		return 0, false
	}
	return *c.env.Index, true
}

// Deps lists the keys of the steps this one needs, sorted.
func (c *Call) Deps() []string {
	keys := make([]string, 0, len(c.env.Deps))
	for k := range c.env.Deps {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Dep decodes the output of the upstream step key into v. An output stored as a
// $blob is read from its file (exec) or presigned URL (http, lambda) as a
// stream. A dep that did not succeed is JSON null (v is left alone).
func (c *Call) Dep(ctx context.Context, key string, v any) error {
	raw, ok := c.env.Deps[key]
	if !ok {
		return fmt.Errorf("dep %q: not among this step's needs", key)
	}
	return c.decode(ctx, "dep "+key, raw, v)
}

// OpenDep opens the output of the upstream step key as a stream of its bytes:
// a $blob's file or URL, or the inline JSON value.
func (c *Call) OpenDep(ctx context.Context, key string) (io.ReadCloser, error) {
	raw, ok := c.env.Deps[key]
	if !ok {
		return nil, fmt.Errorf("dep %q: not among this step's needs", key)
	}
	return c.Open(ctx, raw)
}

// Checkpoint decodes the newest checkpoint of an earlier attempt into v and
// reports whether there was one: resume from it.
func (c *Call) Checkpoint(ctx context.Context, v any) (bool, error) {
	if isNull(c.env.Checkpoint) {
		return false, nil
	}
	return true, c.decode(ctx, "checkpoint", c.env.Checkpoint, v)
}

// SaveCheckpoint stores v (encoded as JSON) as the step's checkpoint: a later
// attempt gets it from Checkpoint. exec sends it on fd 3 (large ones as a
// checkpoint_file); http and lambda PUT it to the envelope's checkpoint_url.
// An error wrapping ErrLeaseLost means the attempt no longer holds its step:
// stop working.
func (c *Call) SaveCheckpoint(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("save checkpoint: encode: %w", err)
	}
	if err := c.ch.checkpoint(ctx, b); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	return nil
}

// Progress reports progress (v, encoded as JSON). exec records it as a
// step.progress event; http and lambda functions have no channel for it, so it
// goes to the log. It doubles as a sign of life in the attempt's log.
func (c *Call) Progress(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("progress: encode: %w", err)
	}
	if err := c.ch.progress(ctx, b); err != nil {
		return fmt.Errorf("progress: %w", err)
	}
	return nil
}

// Suspend ends the attempt without an output: the step waits, holding no
// resources, until a third party POSTs the result to the callback URL it
// returns (or timeout passes, 0: forever; the step then fails with code
// timeout). Hand the URL to whoever finishes the work, then return nil, nil:
// the handler's answer is {"$suspend": …}. The URL is a credential: never log
// it. It fails when the server has no callback URL for the attempt.
func (c *Call) Suspend(timeout time.Duration) (string, error) {
	return c.SuspendWith(SuspendOptions{Timeout: timeout})
}

// SuspendOptions tune SuspendWith.
type SuspendOptions struct {
	// Timeout bounds the wait (at most a year); 0: forever.
	Timeout time.Duration
	// ContinueOnTimeout makes the step succeed with a null output when the
	// timeout passes, instead of failing with code timeout.
	ContinueOnTimeout bool
}

// SuspendWith is Suspend with options.
func (c *Call) SuspendWith(opts SuspendOptions) (string, error) {
	if c.env.CallbackURL == "" {
		return "", errors.New("suspend: the envelope has no callback_url (the server has no signing key, or the step is not a function)")
	}
	if opts.Timeout < 0 {
		return "", errors.New("suspend: a negative timeout")
	}
	s := &suspension{}
	if opts.Timeout > 0 {
		s.Timeout = opts.Timeout.String()
	}
	if opts.ContinueOnTimeout {
		s.OnTimeout = "continue"
	}
	c.mu.Lock()
	c.suspended = s
	c.mu.Unlock()
	return c.env.CallbackURL, nil
}

// suspendOutput is the $suspend answer, or nil when the handler did not suspend.
func (c *Call) suspendOutput() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.suspended == nil {
		return nil
	}
	b, _ := json.Marshal(map[string]*suspension{"$suspend": c.suspended})
	return b
}

// decode decodes raw (inline, or a $blob read as a stream) into v.
func (c *Call) decode(ctx context.Context, what string, raw json.RawMessage, v any) error {
	if isNull(raw) {
		return nil
	}
	if _, ok := ParseBlob(raw); !ok {
		if err := json.Unmarshal(raw, v); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	r, err := c.Open(ctx, raw)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer r.Close()
	if err := json.NewDecoder(r).Decode(v); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}
