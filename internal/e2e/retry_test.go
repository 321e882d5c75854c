package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/client"
)

// retryBundle is a 5-step chain s1 → s2 → s3 → s4 → s5. s1's output (4 KiB, over
// the server's inline limit of 1 KiB) is a blob; s3 outputs the run's input; s4
// runs s4Body.
func retryBundle(s4Body string) map[string]string {
	step := func(key, needs string) string {
		s := "  - key: " + key + "\n    exec: [\"./bin/" + key + "\"]\n    retry: {max_attempts: 1}\n"
		if needs != "" {
			s += "    needs: [" + needs + "]\n"
		}
		return s
	}
	return map[string]string{
		"cairn.yaml": "name: chain\nsteps:\n" + step("s1", "") + step("s2", "s1") + step("s3", "s2") + step("s4", "s3") + step("s5", "s4"),
		"bin/s1":     "#!/bin/bash\ncat >/dev/null\nprintf '{\"big\":\"%s\"}' \"$(head -c 4096 /dev/zero | tr '\\0' x)\"\n",
		"bin/s2":     "#!/bin/bash\ncat >/dev/null\necho '{\"s2\":true}'\n",
		// The run's input, as the envelope carries it: {"n":N}.
		"bin/s3": "#!/bin/bash\nenvelope=$(cat)\nprintf '%s' \"$envelope\" | sed -n 's/.*\"input\":{\"n\":\\([0-9]*\\)}.*/{\"n\":\\1}/p'\n",
		"bin/s4": "#!/bin/bash\ncat >/dev/null\n" + s4Body,
		"bin/s5": "#!/bin/bash\ncat >/dev/null\necho '{\"s5\":true}'\n",
	}
}

// TestRetryAndRerun is retry and rerun (docs/operations.md), through the real
// server and CLI: a 5-step run whose step 4 fails is retried onto a fixed version
// (steps 1–3 keep their single attempt, 4 and 5 run, the run succeeds); then a
// rerun from step 3 with new input reuses 1–2 (the same stored outputs, s1's a
// blob) and runs 3–5, and its dry run printed exactly that plan first.
func TestRetryAndRerun(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{})
	s := st.start(serverOptions{inlineLimit: 1024})
	api := s.api()
	api.deploy(retryBundle("echo 'bug in s4' >&2\nexit 1\n"))
	id := api.startRun("chain", 0, map[string]any{"n": 1})
	run := api.waitRun(id, time.Minute)
	require.Equal(t, client.RunStatusFailed, run.Status)
	require.Equal(t, client.StepStatusSkipped, api.mustStep(id, "s5").Status)

	// The fix, then the retry onto it.
	fixed := api.deploy(retryBundle("echo '{\"s4\":\"fixed\"}'\n"))
	require.Equal(t, int64(2), fixed.Version)
	out := s.cli("run", "retry", id, "--version", "2")
	require.Equal(t, "run "+id+" running (version 2, 2 of 5 steps to run)\n", out)
	// Watched from its first event, the retried run's stream goes past its first
	// run.failed to the end of the retry.
	watched := s.cli("run", "watch", id)
	require.Regexp(t, `(?s)run\.failed.*run\.retried.*run\.succeeded`, watched)
	run = api.waitRun(id, time.Minute)
	require.Equal(t, client.RunStatusSucceeded, run.Status, "run error: %s", jsonOf(run.Error))
	require.Equal(t, int64(2), run.Version)
	for _, key := range []string{"s1", "s2", "s3", "s5"} {
		require.Equal(t, []string{"succeeded"}, attemptStatuses(api.mustAttempts(id, key)), "step %s ran once", key)
	}
	require.Equal(t, []string{"failed", "succeeded"}, attemptStatuses(api.mustAttempts(id, "s4")))
	source := map[string]string{}
	for _, st := range api.mustSteps(id) {
		source[st.Key] = string(jsonOf(st.Output))
	}
	ref, ok := blobstore.ParseRef(jsonOf(api.mustStep(id, "s1").Output))
	require.True(t, ok, "s1's output is a $blob reference: %s", source["s1"])

	// The dry run prints the plan; the rerun the same plan and the new run.
	out = s.cli("run", "rerun", id, "--from", "s3", "--input", `{"n":2}`, "--dry-run")
	require.Equal(t, "reuse: s1, s2\nrun: s3, s4, s5\n", out)
	out = s.cli("run", "rerun", id, "--from", "s3", "--input", `{"n":2}`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, "%s", out)
	require.Equal(t, []string{"reuse: s1, s2", "run: s3, s4, s5"}, lines[:2])
	rerunID := lines[2]
	rerun := api.waitRun(rerunID, time.Minute)
	require.Equal(t, client.RunStatusSucceeded, rerun.Status, "run error: %s", jsonOf(rerun.Error))
	require.Equal(t, id, deref(rerun.RerunOf).String())
	require.Equal(t, "s3", deref(rerun.RerunFromStep))

	for _, key := range []string{"s1", "s2"} {
		require.Empty(t, api.mustAttempts(rerunID, key), "step %s is reused, not run", key)
		require.Equal(t, source[key], string(jsonOf(api.mustStep(rerunID, key).Output)), "step %s has the same stored output", key)
	}
	reused, ok := blobstore.ParseRef(jsonOf(api.mustStep(rerunID, "s1").Output))
	require.True(t, ok)
	require.Equal(t, ref.Digest, reused.Digest, "the same blob")
	require.Equal(t, api.output(id, "s1"), api.output(rerunID, "s1"))
	for _, key := range []string{"s3", "s4", "s5"} {
		require.Equal(t, []string{"succeeded"}, attemptStatuses(api.mustAttempts(rerunID, key)), "step %s ran", key)
	}
	require.JSONEq(t, `{"n":2}`, string(jsonOf(api.mustStep(rerunID, "s3").Output)), "s3 ran with the new input")
}
