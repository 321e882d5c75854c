package e2e

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/internal/testenv"
)

// chargeScript is an exec function that starts work elsewhere: it hands its
// envelope's callback_url to "the third party" (its log, which the test reads) and
// answers that its result comes later.
// chargeScript hands its callback URL on, as a function tells a third party: in
// base64 on stderr, where the test reads it (the URL itself, a credential, is
// masked in what viewers see of the log).
const chargeScript = `#!/bin/sh
url=$(sed -n 's/.*"callback_url":"\([^"]*\)".*/\1/p')
echo "callback_url_base64=$(printf '%s' "$url" | base64 -w0)" >&2
echo '{"$suspend": {"timeout": "TIMEOUT"}}'
`

var callbackURLLine = regexp.MustCompile(`callback_url_base64=(\S+)`)

// callbackRun deploys a workflow named name whose step charge suspends for a
// callback with the given timeout (then receipt runs), starts a run,
// waits until charge is suspended for its callback and returns the run and the
// callback URL the function was given.
func callbackRun(t *testing.T, c *apiClient, name, timeout string) (id, url string) {
	t.Helper()
	c.deploy(map[string]string{
		"cairn.yaml": "name: " + name + "\nsteps:\n" +
			"  - {key: charge, exec: [\"./bin/charge\"]}\n" +
			"  - {key: receipt, needs: [charge], builtin: echo}\n",
		"bin/charge": strings.ReplaceAll(chargeScript, "TIMEOUT", timeout),
	})
	id = c.startRun(name, 0, nil)
	st := c.waitStep(id, "charge", time.Minute, "suspended for its callback", func(s client.Step) bool {
		return s.Status == client.StepStatusSuspended
	})
	require.NotNil(t, st.WaitingFor)
	require.Equal(t, client.WaitingForKindCallback, st.WaitingFor.Kind)
	m := callbackURLLine.FindStringSubmatch(c.logs(id, "charge", 1))
	require.NotNil(t, m, "the function's log names its callback_url")
	decoded, err := base64.StdEncoding.DecodeString(m[1])
	require.NoError(t, err)
	return id, string(decoded)
}

// postCallback POSTs body to a callback URL, with no API token.
func postCallback(t *testing.T, url, contentType string, body []byte) (int, string) {
	t.Helper()
	ctx, cancel := withTimeout(30 * time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// TestCallbackThroughRealServer: an exec function answers {"$suspend": …}; its
// step is suspended (waiting_for kind callback) and holds no slot; the server is
// SIGKILLed and another takes over; a third party POSTs the result to the
// envelope's callback_url, on the new server and without an API token, and the
// run goes on with it as the step's output. A forged token is a 401, the same
// token again a 409 callback_not_waiting; a 1s timeout fails the step with code
// timeout; a run canceled while it waits is canceled, and its callback is a 409.
// The blob store is a real S3 server.
func TestCallbackThroughRealServer(t *testing.T) {
	t.Parallel()
	s3, bucket := testenv.S3Bucket(t)
	st := newStack(t, stackOptions{blobURL: s3.URL(bucket), env: s3.Env()})
	s1 := st.start(serverOptions{})
	c := s1.api()
	id, url := callbackRun(t, c, "pay", "1h")
	require.True(t, strings.HasPrefix(url, s1.url+"/v1/callbacks/"), "%s is on the server's public URL", url)

	// The wait is a row, and the token is signed with the deployment's key: after a
	// crash, any server takes it.
	s1.kill()
	s2 := st.start(serverOptions{})
	c = s2.api()
	url = s2.url + strings.TrimPrefix(url, s1.url)

	forged := url[:len(url)-1] + map[bool]string{true: "0", false: "1"}[!strings.HasSuffix(url, "0")]
	status, body := postCallback(t, forged, "application/json", []byte(`{"paid":true}`))
	require.Equal(t, http.StatusUnauthorized, status, "%s", body)
	require.Equal(t, client.StepStatusSuspended, c.mustStep(id, "charge").Status, "a forged token changes nothing")

	status, body = postCallback(t, url, "application/json", []byte(`{"paid":true,"amount":42}`))
	require.Equal(t, http.StatusOK, status, "%s", body)
	run := c.waitRun(id, time.Minute)
	require.Equal(t, client.RunStatusSucceeded, run.Status, "run error: %s", jsonOf(run.Error))
	require.JSONEq(t, `{"paid":true,"amount":42}`, string(c.output(id, "charge")))
	var kinds []string
	for _, e := range c.events(id) {
		if e.Type == "step.suspended" || e.Type == "step.resumed" {
			kinds = append(kinds, e.Type+":"+string(jsonOf(e.Data)))
		}
	}
	require.Len(t, kinds, 2)
	require.Contains(t, kinds[0], `"kind":"callback"`)
	require.Contains(t, kinds[1], `"reason":"callback"`)

	// Reused: the step no longer waits for it.
	status, body = postCallback(t, url, "application/json", []byte(`{"paid":false}`))
	require.Equal(t, http.StatusConflict, status, "%s", body)
	require.Contains(t, body, "callback_not_waiting")
	require.JSONEq(t, `{"paid":true,"amount":42}`, string(c.output(id, "charge")), "nothing changed")

	// A timeout: the step fails with code timeout, and its callback comes too late.
	id, url = callbackRun(t, c, "pay-fast", "1s")
	run = c.waitRun(id, time.Minute)
	require.Equal(t, client.RunStatusFailed, run.Status)
	require.Equal(t, "timeout", errorOf(c.mustStep(id, "charge").LastError).Code)
	status, body = postCallback(t, strings.Replace(url, s1.url, s2.url, 1), "application/json", []byte(`1`))
	require.Equal(t, http.StatusConflict, status, "%s", body)

	// Cancel while it waits.
	id, url = callbackRun(t, c, "pay-cancel", "1h")
	ctx, cancel := withTimeout(30 * time.Second)
	defer cancel()
	resp, err := c.cl.CancelRunWithResponse(ctx, c.runID(id), client.CancelRunJSONRequestBody{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), "%s", resp.Body)
	run = c.waitRun(id, time.Minute)
	require.Equal(t, client.RunStatusCanceled, run.Status)
	status, body = postCallback(t, url, "application/json", []byte(`1`))
	require.Equal(t, http.StatusConflict, status, "%s", body)
}

// TestCallbackNonRootServer: the same through a server running as nobody with its
// handlers isolated (the production path): the function suspends, and a callback
// of any bytes becomes the step's output as a blob in S3.
func TestCallbackNonRootServer(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	if os.Geteuid() != 0 {
		t.Skip("dropping to another user needs root; this test run is already not root")
	}
	s3, bucket := testenv.S3Bucket(t)
	st := newStack(t, stackOptions{blobURL: s3.URL(bucket), env: s3.Env()})
	s := st.start(serverOptions{uid: 65534, env: []string{"CAIRN_EXEC_ISOLATION=bwrap"}})
	c := s.api()
	id, url := callbackRun(t, c, "pay", "1h")
	receipt := []byte("id,amount\n1,42\n")
	status, body := postCallback(t, url, "text/csv", receipt)
	require.Equal(t, http.StatusOK, status, "%s", body)
	run := c.waitRun(id, time.Minute)
	require.Equal(t, client.RunStatusSucceeded, run.Status, "run error: %s", jsonOf(run.Error))
	require.Equal(t, receipt, c.output(id, "charge"))
	require.Contains(t, string(jsonOf(c.mustStep(id, "charge").Output)), `"$blob"`)
}
