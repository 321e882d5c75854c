package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			out, err := handle(context.Background(), envelope{RunID: "r", Step: "hello", Attempt: 1, Input: json.RawMessage(tt.input)})
			if tt.retryable == nil {
				require.NoError(t, err)
				require.Equal(t, tt.greeting, out.Greeting)
				return
			}
			require.Error(t, err)
			// Cairn reads "retryable": false from the error text when it is JSON.
			var body struct {
				Message   string `json:"message"`
				Retryable *bool  `json:"retryable"`
			}
			if json.Unmarshal([]byte(err.Error()), &body) != nil || body.Retryable == nil {
				require.True(t, *tt.retryable, "a plain error is retried: %v", err)
				return
			}
			require.Equal(t, *tt.retryable, *body.Retryable)
			require.NotEmpty(t, body.Message)
		})
	}
}
