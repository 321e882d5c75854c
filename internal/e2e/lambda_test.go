package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/internal/testenv"
)

// TestLambdaEmulator: `cairn serve` runs lambda steps against AWS's Lambda
// Runtime Interface Emulator running the lambda-hello example function
// (aws-lambda-go, built by testenv.LambdaHello), through the real Invoke path:
// a greeting succeeds; a terminal error fails the step at once; a retryable one
// is retried up to max_attempts; a large upstream output reaches the function
// as a presigned URL of the S3 blob store, which it reads; and a function that
// runs past the step's timeout is timed out.
//
// How calls are kept apart: the emulator serves one invocation at a time (a
// second one in flight crashes it), so the server runs with CAIRN_CONCURRENCY=1:
// its dispatcher runs one attempt at a time, retries included, whatever the
// runs queued. That holds until a step times out: Cairn gives up on the call,
// but the emulator goes on running the function (as Lambda would). So the
// timeout run comes last, alone, with one attempt; the emulator is killed with
// the test.
func TestLambdaEmulator(t *testing.T) {
	t.Parallel()
	const inlineLimit = 64 << 10
	const bigSize = 300 << 10

	emu := testenv.StartLambdaEmulator(t, testenv.LambdaHello(t), nil)
	s3, bucket := testenv.S3Bucket(t) // presigned URLs need S3: the file store has none
	st := newStack(t, stackOptions{blobURL: s3.URL(bucket), env: s3.Env()})
	s := st.start(serverOptions{
		inlineLimit: inlineLimit,
		env: []string{
			"CAIRN_LAMBDA_ENDPOINT=" + emu.Endpoint,
			"CAIRN_LAMBDA_EMULATOR=true",
			"CAIRN_CONCURRENCY=1",
		},
	})
	api := s.api()
	// The manifests name the function as on AWS: the emulator serves its one
	// function whatever the name.
	api.deploy(map[string]string{"cairn.yaml": `name: greet
steps:
  - key: hello
    lambda: {function: cairn-hello}
    timeout: 30s
    retry: {max_attempts: 3, delay: 100ms}
`})
	api.deploy(map[string]string{
		"cairn.yaml": `name: greet-large
steps:
  - key: big
    exec: ["./bin/big"]
  - key: hello
    needs: [big]
    lambda: {function: cairn-hello}
    timeout: 30s
`,
		// A JSON string of bigSize bytes, quotes included.
		"bin/big": "#!/bin/bash\nprintf '\"'; head -c " + itoa(bigSize-2) + " /dev/zero | tr '\\0' x; printf '\"'\n",
	})
	api.deploy(map[string]string{"cairn.yaml": `name: greet-slow
steps:
  - key: hello
    lambda: {function: cairn-hello}
    timeout: 2s
    retry: {max_attempts: 1}
`})

	// Queued at once: the dispatcher takes them one attempt at a time.
	greet := api.startRun("greet", 0, map[string]any{"name": "ada"})
	terminal := api.startRun("greet", 0, map[string]any{"fail": "terminal"})
	retryable := api.startRun("greet", 0, map[string]any{"fail": "retryable"})
	large := api.startRun("greet-large", 0, map[string]any{"name": "ada"})

	t.Run("success", func(t *testing.T) {
		run := api.waitRun(greet, time.Minute)
		require.Equal(t, client.RunStatusSucceeded, run.Status, "run error: %s", jsonOf(run.Error))
		require.JSONEq(t, `{"greeting":"hello, ada"}`, string(api.output(greet, "hello")))
	})

	t.Run("terminal error is not retried", func(t *testing.T) {
		run := api.waitRun(terminal, time.Minute)
		require.Equal(t, client.RunStatusFailed, run.Status)
		as := api.mustAttempts(terminal, "hello")
		require.Equal(t, []string{"failed"}, attemptStatuses(as), "one attempt of 3 allowed")
		e := errorOf(as[0].Error)
		require.Equal(t, "function_error", e.Code)
		require.False(t, e.Retryable)
		require.Contains(t, e.Message, "asked to fail for good")
	})

	t.Run("retryable error is retried", func(t *testing.T) {
		run := api.waitRun(retryable, time.Minute)
		require.Equal(t, client.RunStatusFailed, run.Status)
		as := api.mustAttempts(retryable, "hello")
		require.Equal(t, []string{"failed", "failed", "failed"}, attemptStatuses(as))
		for i, a := range as {
			e := errorOf(a.Error)
			require.Equal(t, "function_error", e.Code)
			require.True(t, e.Retryable)
			// The function saw each attempt's number in its envelope.
			require.Contains(t, e.Message, "asked to fail on attempt "+itoa(i+1)+";")
		}
	})

	t.Run("large input by presigned url", func(t *testing.T) {
		run := api.waitRun(large, time.Minute)
		require.Equal(t, client.RunStatusSucceeded, run.Status, "run error: %s", jsonOf(run.Error))
		ref, ok := blobstore.ParseRef(jsonOf(api.mustStep(large, "big").Output))
		require.True(t, ok, "the big output is stored as a $blob")
		require.Equal(t, int64(bigSize), ref.Size)
		// The function counts what the $blob's URL served: an inline reference
		// would count its own few bytes.
		var out struct {
			Greeting  string           `json:"greeting"`
			DepsBytes map[string]int64 `json:"deps_bytes"`
		}
		require.NoError(t, json.Unmarshal(api.output(large, "hello"), &out))
		require.Equal(t, "hello, ada", out.Greeting)
		require.Equal(t, map[string]int64{"big": bigSize}, out.DepsBytes)
	})

	// Last and alone: see above. The function would answer after a minute.
	t.Run("timeout", func(t *testing.T) {
		slow := api.startRun("greet-slow", 0, map[string]any{"name": "ada", "sleep": "1m"})
		run := api.waitRun(slow, time.Minute)
		require.Equal(t, client.RunStatusFailed, run.Status)
		as := api.mustAttempts(slow, "hello")
		require.Equal(t, []string{"timed_out"}, attemptStatuses(as))
		e := errorOf(as[0].Error)
		require.Equal(t, "timeout", e.Code)
		require.True(t, strings.HasPrefix(e.Message, "timed out after 2s"), e.Message)
		require.NotNil(t, as[0].FinishedAt)
		require.Less(t, as[0].FinishedAt.Sub(as[0].StartedAt), 30*time.Second, "the attempt ends at the step's timeout, not with the function")
	})
}
