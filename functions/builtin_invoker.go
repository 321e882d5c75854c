package functions

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"
)

// Names of the built-in functions (Spec.Builtin).
const (
	// BuiltinNoop succeeds at once with output null.
	BuiltinNoop = "noop"
	// BuiltinEcho succeeds with params.value when the step's params have a "value"
	// key, else (a map instance) with its item, else with the run's input, else
	// with null.
	BuiltinEcho = "echo"
	// BuiltinSleep waits params.duration (a Go duration string such as "2s", or a
	// number of seconds), then succeeds with output null. It honours ctx.
	BuiltinSleep = "sleep"
	// BuiltinFail fails its first params.times attempts (every attempt when times
	// is absent) with a retryable *Error, then succeeds with output
	// {"attempt": N}. params.retryable: false makes the failure terminal;
	// params.message replaces the default message.
	BuiltinFail = "fail"
)

// BuiltinConfig configures a Builtin invoker. A nil *BuiltinConfig means defaults.
type BuiltinConfig struct {
	// Logger receives the invoker's diagnostics. Default: discard.
	Logger *slog.Logger
}

// Builtin runs the built-in functions noop, echo, sleep and fail (see the
// Builtin* constants), used by tests and demos. Outputs are JSON
// (content type application/json). It is safe for concurrent use.
type Builtin struct {
	logger *slog.Logger
}

// NewBuiltin returns a Builtin invoker configured by cfg (nil means defaults).
func NewBuiltin(cfg *BuiltinConfig) *Builtin {
	if cfg == nil {
		cfg = &BuiltinConfig{}
	}
	return &Builtin{logger: loggerOrDiscard(cfg.Logger).With("component", "builtin_invoker")}
}

// Invoke runs the built-in named by inv.Spec.Builtin. An unknown name or params of
// the wrong shape is a terminal *Error with CodeInvalidSpec; fail returns the
// *Error it was asked for; sleep returns context.Cause(ctx) when ctx ends first.
func (b *Builtin) Invoke(ctx context.Context, inv *Invocation, sink Sink) error {
	name := inv.Spec.Builtin
	params, err := builtinParams(inv.Envelope.Params)
	if err != nil {
		return invalidSpecf("builtin %s: %v", name, err)
	}

	var output json.RawMessage
	switch name {
	case BuiltinNoop:
		output = json.RawMessage(jsonNull)
	case BuiltinEcho:
		if inv.Envelope.Index != nil {
			output = builtinEcho(params, inv.Envelope.Item)
		} else {
			output = builtinEcho(params, inv.Envelope.Input)
		}
	case BuiltinSleep:
		if err := builtinSleep(ctx, params); err != nil {
			return err
		}
		output = json.RawMessage(jsonNull)
	case BuiltinFail:
		output, err = builtinFail(params, inv.Envelope.Attempt)
		if err != nil {
			return err
		}
	default:
		return invalidSpecf("unknown builtin %q (want noop, echo, sleep or fail)", name)
	}

	b.logger.DebugContext(ctx, "builtin succeeded", "run_id", inv.Envelope.RunID,
		"step", inv.Envelope.Step, "attempt", inv.Envelope.Attempt, "builtin", name)
	sink.SetOutputContentType("application/json")
	if _, err := sink.Output().Write(output); err != nil {
		return sinkWriteError("builtin: write output", err)
	}
	return nil
}

// jsonNull is the JSON literal null (a constant: no package-level mutable state).
const jsonNull = "null"

// isJSONNull reports whether raw is absent or the JSON literal null.
func isJSONNull(raw json.RawMessage) bool {
	trimmed := bytes.TrimSpace(raw)
	return len(trimmed) == 0 || string(trimmed) == jsonNull
}

// builtinParams decodes a step's params: absent or null means none; anything but
// an object is an error.
func builtinParams(raw json.RawMessage) (map[string]json.RawMessage, error) {
	if isJSONNull(raw) {
		return map[string]json.RawMessage{}, nil
	}
	var params map[string]json.RawMessage
	if err := json.Unmarshal(raw, &params); err != nil {
		return nil, fmt.Errorf("params must be a JSON object: %w", err)
	}
	return params, nil
}

func builtinEcho(params map[string]json.RawMessage, input json.RawMessage) json.RawMessage {
	if v, ok := params["value"]; ok {
		return v
	}
	if !isJSONNull(input) {
		return input
	}
	return json.RawMessage(jsonNull)
}

func builtinSleep(ctx context.Context, params map[string]json.RawMessage) error {
	raw, ok := params["duration"]
	if !ok || isJSONNull(raw) {
		return invalidSpecf("builtin sleep: params.duration is required")
	}
	var d time.Duration
	var s string
	var seconds float64
	switch {
	case json.Unmarshal(raw, &s) == nil:
		parsed, err := time.ParseDuration(s)
		if err != nil {
			return invalidSpecf("builtin sleep: params.duration: %v", err)
		}
		d = parsed
	case json.Unmarshal(raw, &seconds) == nil:
		d = time.Duration(seconds * float64(time.Second))
	default:
		return invalidSpecf("builtin sleep: params.duration must be a duration string or a number of seconds")
	}
	if d < 0 {
		return invalidSpecf("builtin sleep: params.duration %s is negative", d)
	}

	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func builtinFail(params map[string]json.RawMessage, attempt int) (json.RawMessage, error) {
	var p struct {
		Times     *int    `json:"times"`
		Retryable *bool   `json:"retryable"`
		Message   *string `json:"message"`
	}
	// Re-encode the decoded map so that field types are checked in one place.
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("builtin fail: encode params: %w", err)
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, invalidSpecf("builtin fail: params: %v", err)
	}
	if p.Times != nil && *p.Times < 0 {
		return nil, invalidSpecf("builtin fail: params.times %d is negative", *p.Times)
	}

	if p.Times != nil && attempt > *p.Times {
		out, err := json.Marshal(map[string]int{"attempt": attempt})
		if err != nil {
			return nil, fmt.Errorf("builtin fail: encode output: %w", err)
		}
		return out, nil
	}

	fnErr := &Error{
		Message:   fmt.Sprintf("builtin fail: attempt %d failed on purpose", attempt),
		Retryable: p.Retryable == nil || *p.Retryable,
		Code:      CodeFailed,
	}
	if p.Message != nil && *p.Message != "" {
		fnErr.Message = *p.Message
	}
	return nil, fnErr
}
