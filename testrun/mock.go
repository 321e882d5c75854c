package testrun

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/functions"
)

// CodeNotMocked is the error code of an attempt of an http or lambda step
// that a case does not mock, without --allow-network.
const CodeNotMocked = "not_mocked"

// mockInvoker answers the attempts of one kind of step: a mocked step's
// outcome for its attempt, or the real invoker's answer for a step the case
// does not mock (none for http and lambda without AllowNetwork).
type mockInvoker struct {
	kind  bundle.Kind
	mocks map[string]Mock
	real  functions.Invoker
	// handled is told of each attempt a real handler runs.
	handled func(key string)
}

// mockFor returns the mock of a step key: its own, or its map step's for a map
// instance ("KEY[3]" falls back to "KEY").
func mockFor(mocks map[string]Mock, key string) (Mock, bool) {
	if m, ok := mocks[key]; ok {
		return m, true
	}
	if i := strings.LastIndexByte(key, '['); i > 0 && strings.HasSuffix(key, "]") {
		m, ok := mocks[key[:i]]
		return m, ok
	}
	return nil, false
}

// Invoke implements functions.Invoker.
func (m *mockInvoker) Invoke(ctx context.Context, inv *functions.Invocation, sink functions.Sink) error {
	mock, ok := mockFor(m.mocks, inv.Envelope.Step)
	if !ok {
		if m.real == nil {
			return &functions.Error{Code: CodeNotMocked, Message: fmt.Sprintf(
				"step %s (%s) has no mock in this case: mock it, or run cairn test --allow-network to call it", inv.Envelope.Step, m.kind)}
		}
		m.handled(inv.Envelope.Step)
		return m.real.Invoke(ctx, inv, sink)
	}
	n := inv.Envelope.Attempt
	if n < 1 {
		n = 1
	}
	o := mock[min(n, len(mock))-1]
	if o.Error != nil {
		retryable := o.Error.Retryable == nil || *o.Error.Retryable
		msg := o.Error.Message
		if msg == "" {
			msg = "mocked failure"
		}
		return &functions.Error{Message: msg, Code: o.Error.Code, Retryable: retryable}
	}
	var out any = o.Output
	if o.Suspend != nil {
		out = map[string]any{"$suspend": map[string]any{"timeout": o.Suspend.Std().String()}}
	}
	b, err := json.Marshal(jsonValue(out))
	if err != nil {
		return &functions.Error{Message: fmt.Sprintf("mock of %s: %v", inv.Envelope.Step, err), Code: "mock_invalid"}
	}
	sink.SetOutputContentType("application/json")
	_, err = sink.Output().Write(b)
	return err
}

// jsonValue turns a value decoded from YAML (maps with any keys) into one
// encoding/json writes.
func jsonValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonValue(e)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(k)] = jsonValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	default:
		return v
	}
}
