package functions

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBuiltinInvoke(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name      string
		builtin   string
		params    string
		input     string
		attempt   int
		wantOut   string
		wantErr   *Error // compared on Retryable, Code and, when set, Message
		errSubstr string
	}{
		{name: "noop", builtin: "noop", wantOut: "null"},
		{name: "echo value", builtin: "echo", params: `{"value":{"a":[1,2]}}`, input: `{"x":1}`, wantOut: `{"a":[1,2]}`},
		{name: "echo null value wins over input", builtin: "echo", params: `{"value":null}`, input: `{"x":1}`, wantOut: `null`},
		{name: "echo input", builtin: "echo", params: `{"other":1}`, input: `{"x":1}`, wantOut: `{"x":1}`},
		{name: "echo nothing", builtin: "echo", wantOut: `null`},
		{name: "echo null input", builtin: "echo", params: `null`, input: `null`, wantOut: `null`},
		{name: "sleep string", builtin: "sleep", params: `{"duration":"1ms"}`, wantOut: `null`},
		{name: "sleep seconds", builtin: "sleep", params: `{"duration":0.001}`, wantOut: `null`},
		{name: "sleep missing duration", builtin: "sleep", wantErr: &Error{Code: CodeInvalidSpec}, errSubstr: "duration is required"},
		{name: "sleep bad duration", builtin: "sleep", params: `{"duration":"soon"}`, wantErr: &Error{Code: CodeInvalidSpec}},
		{name: "sleep negative", builtin: "sleep", params: `{"duration":"-1s"}`, wantErr: &Error{Code: CodeInvalidSpec}},
		{name: "fail every attempt", builtin: "fail", attempt: 7, wantErr: &Error{Code: CodeFailed, Retryable: true}, errSubstr: "attempt 7"},
		{name: "fail first two, attempt 2", builtin: "fail", params: `{"times":2}`, attempt: 2, wantErr: &Error{Code: CodeFailed, Retryable: true}},
		{name: "fail first two, attempt 3", builtin: "fail", params: `{"times":2}`, attempt: 3, wantOut: `{"attempt":3}`},
		{name: "fail zero times", builtin: "fail", params: `{"times":0}`, attempt: 1, wantOut: `{"attempt":1}`},
		{name: "fail terminal with message", builtin: "fail", params: `{"retryable":false,"message":"nope"}`, attempt: 1, wantErr: &Error{Code: CodeFailed, Message: "nope"}},
		{name: "fail bad times", builtin: "fail", params: `{"times":"two"}`, attempt: 1, wantErr: &Error{Code: CodeInvalidSpec}},
		{name: "params not an object", builtin: "echo", params: `[1]`, wantErr: &Error{Code: CodeInvalidSpec}},
		{name: "unknown builtin", builtin: "explode", wantErr: &Error{Code: CodeInvalidSpec}, errSubstr: `unknown builtin "explode"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			inv := &Invocation{
				Envelope: Envelope{RunID: "r1", Step: "s", Attempt: tt.attempt},
				Spec:     Spec{Builtin: tt.builtin},
			}
			if tt.params != "" {
				inv.Envelope.Params = json.RawMessage(tt.params)
			}
			if tt.input != "" {
				inv.Envelope.Input = json.RawMessage(tt.input)
			}
			sink := &testSink{}
			err := NewBuiltin(nil).Invoke(context.Background(), inv, sink)

			if tt.wantErr == nil {
				require.NoError(t, err)
				require.JSONEq(t, tt.wantOut, sink.Out())
				require.Equal(t, "application/json", sink.ContentType())
				return
			}
			var fnErr *Error
			require.ErrorAs(t, err, &fnErr)
			require.Equal(t, tt.wantErr.Code, fnErr.Code)
			require.Equal(t, tt.wantErr.Retryable, fnErr.Retryable)
			if tt.wantErr.Message != "" {
				require.Equal(t, tt.wantErr.Message, fnErr.Message)
			}
			if tt.errSubstr != "" {
				require.Contains(t, fnErr.Message, tt.errSubstr)
			}
			require.Empty(t, sink.Out())
		})
	}
}

func TestBuiltinSleepHonoursContext(t *testing.T) {
	t.Parallel()

	cause := errors.New("run canceled by user")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	inv := &Invocation{Spec: Spec{Builtin: "sleep"}, Envelope: Envelope{Params: json.RawMessage(`{"duration":"1h"}`)}}
	err := NewBuiltin(&BuiltinConfig{}).Invoke(ctx, inv, &testSink{})
	require.ErrorIs(t, err, cause)

	ctx, cancelTimeout := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancelTimeout()
	err = NewBuiltin(nil).Invoke(ctx, inv, &testSink{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestBuiltinOutputLeaseLost(t *testing.T) {
	t.Parallel()

	sink := &testSink{outputErr: ErrLeaseLost}
	err := NewBuiltin(nil).Invoke(context.Background(), &Invocation{Spec: Spec{Builtin: "noop"}}, sink)
	require.ErrorIs(t, err, ErrLeaseLost)
}
