package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/lambda/messages"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/fn"
)

// invoke calls the function as Lambda would, through fn's Lambda adapter.
func invoke(t *testing.T, env map[string]any) (json.RawMessage, error) {
	t.Helper()
	payload, err := json.Marshal(env)
	require.NoError(t, err)
	r, err := fn.LambdaHandler(fn.Typed(handle))(context.Background(), payload)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	return b, nil
}

func TestHandle(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name     string
		input    string
		greeting string
		// retryable is nil when the call succeeds.
		retryable *bool
	}{
		{name: "name", input: `{"name":"ada"}`, greeting: "hello, ada"},
		{name: "no input", input: `null`, greeting: "hello, world"},
		{name: "terminal", input: `{"fail":"terminal"}`, retryable: new(false)},
		{name: "retryable", input: `{"fail":"retryable"}`, retryable: new(true)},
		{name: "unknown fail", input: `{"fail":"sometimes"}`, retryable: new(false)},
		{name: "not an object", input: `[1]`, retryable: new(false)},
		{name: "sleep", input: `{"name":"ada","sleep":"1ms"}`, greeting: "hello, ada"},
		{name: "bad sleep", input: `{"sleep":"soon"}`, retryable: new(false)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			out, err := invoke(t, map[string]any{"run_id": "r", "step": "hello", "attempt": 1, "input": json.RawMessage(tt.input)})
			if tt.retryable == nil {
				require.NoError(t, err)
				var o output
				require.NoError(t, json.Unmarshal(out, &o))
				require.Equal(t, tt.greeting, o.Greeting)
				return
			}
			// Cairn reads "retryable" from the function error's errorMessage.
			var ie messages.InvokeResponse_Error
			require.ErrorAs(t, err, &ie)
			var body struct {
				Message   string `json:"message"`
				Retryable *bool  `json:"retryable"`
			}
			require.NoError(t, json.Unmarshal([]byte(ie.Message), &body))
			require.Equal(t, *tt.retryable, *body.Retryable)
			require.NotEmpty(t, body.Message)
		})
	}
}

// TestHandleDeps: upstream outputs are counted, inline or fetched from a $blob URL.
func TestHandleDeps(t *testing.T) {
	t.Parallel()

	big := strings.Repeat("x", 300<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(big))
	}))
	t.Cleanup(srv.Close)
	deps := map[string]json.RawMessage{
		"small": json.RawMessage(`{"n":1}`),
		"big":   json.RawMessage(`{"$blob":{"digest":"sha256:00","size":307200,"url":"` + srv.URL + `/object"}}`),
	}
	out, err := invoke(t, map[string]any{"step": "hello", "attempt": 1, "input": map[string]string{"name": "ada"}, "deps": deps})
	require.NoError(t, err)
	var o output
	require.NoError(t, json.Unmarshal(out, &o))
	require.Equal(t, "hello, ada", o.Greeting)
	require.Equal(t, map[string]int64{"small": 7, "big": 300 << 10}, o.DepsBytes)

	// A size that does not match what the URL serves is an error, not a count.
	deps["big"] = json.RawMessage(`{"$blob":{"digest":"sha256:00","size":5,"url":"` + srv.URL + `/object"}}`)
	_, err = invoke(t, map[string]any{"step": "hello", "attempt": 1, "deps": deps})
	var ie messages.InvokeResponse_Error
	require.ErrorAs(t, err, &ie)
	require.Contains(t, ie.Message, "served 307200 bytes, not 5")
}
