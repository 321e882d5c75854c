package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
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
		{name: "sleep", input: `{"name":"ada","sleep":"1ms"}`, greeting: "hello, ada"},
		{name: "bad sleep", input: `{"sleep":"soon"}`, retryable: new(false)},
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
	out, err := handle(context.Background(), envelope{Step: "hello", Attempt: 1, Input: json.RawMessage(`{"name":"ada"}`), Deps: deps})
	require.NoError(t, err)
	require.Equal(t, "hello, ada", out.Greeting)
	require.Equal(t, map[string]int64{"small": 7, "big": 300 << 10}, out.DepsBytes)

	// A size that does not match what the URL serves is an error, not a count.
	deps["big"] = json.RawMessage(`{"$blob":{"digest":"sha256:00","size":5,"url":"` + srv.URL + `/object"}}`)
	_, err = handle(context.Background(), envelope{Step: "hello", Attempt: 1, Deps: deps})
	require.ErrorContains(t, err, "served 307200 bytes, not 5")
}
