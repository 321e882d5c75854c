package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/internal/testenv"
)

// TestPostgresOutage: PostgreSQL stops for 10 s in the middle of a run. Meanwhile
// /readyz answers 503; nothing is written failed or canceled because of the outage;
// the servers reconnect by themselves and the run succeeds.
func TestPostgresOutage(t *testing.T) {
	t.Parallel()
	const outage = 10 * time.Second
	c := testenv.PG(t)
	st := newStack(t, stackOptions{dbURL: testenv.ClusterDatabaseURL(t, c)})
	a := st.start(serverOptions{name: "a"})
	b := st.start(serverOptions{name: "b"})
	api := a.api()

	// The attempt running when the database goes away outlives its lease (2 s). Its
	// dispatcher keeps trying to record the outcome, and after the outage every
	// sweeper waits a lease TTL before sweeping, so the owners renew their leases
	// and report first: nothing is written failed or interrupted because of the
	// outage, even with the default max_attempts of 1.
	api.deploy(map[string]string{
		"cairn.yaml": `name: pg-outage
steps:
  - key: first
    builtin: sleep
    with: {duration: 1s}
  - key: work
    needs: [first]
    exec: ["./bin/work"]
  - key: third
    needs: [work]
    builtin: sleep
    with: {duration: 1s}
  - key: fourth
    needs: [third]
    builtin: sleep
    with: {duration: 1s}
`,
		"bin/work": "#!/bin/bash\nsleep 3\necho '{\"worked\":'$CAIRN_ATTEMPT'}'\n",
	})
	api.deploy(map[string]string{"cairn.yaml": "name: pg-outage-ping\nsteps:\n  - key: ping\n    builtin: noop\n"})
	runID := api.startRun("pg-outage", 0, nil)

	// Wait until the exec step runs: the outage hits a running attempt.
	api.waitStep(runID, "work", 20*time.Second, "running", func(s client.Step) bool { return s.Status == client.StepStatusRunning })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	down := time.Now()
	require.NoError(t, c.Stop(ctx))
	for _, s := range []*server{a, b} {
		// Wait for /readyz to report the outage.
		require.Eventually(t, func() bool { return s.readyz() == http.StatusServiceUnavailable }, 5*time.Second, 50*time.Millisecond,
			"/readyz of server %s during the outage", s.name)
	}
	time.Sleep(time.Until(down.Add(outage))) // the outage lasts 10 s
	for _, s := range []*server{a, b} {
		require.Equal(t, http.StatusServiceUnavailable, s.readyz(), "/readyz of server %s at the end of the outage", s.name)
	}
	require.NoError(t, c.Start(ctx))
	back := time.Now()
	t.Logf("PostgreSQL was down for %s", back.Sub(down).Round(time.Millisecond))

	for _, s := range []*server{a, b} {
		// Wait for the server to reconnect by itself.
		require.Eventually(t, func() bool { return s.readyz() == http.StatusOK }, 10*time.Second, 50*time.Millisecond,
			"/readyz of server %s after the outage", s.name)
	}
	run := api.waitRun(runID, 45*time.Second)
	t.Logf("run finished %s after PostgreSQL came back", run.FinishedAt.Sub(back).Round(time.Millisecond))
	require.Equal(t, client.RunStatusSucceeded, run.Status, "run error: %s", jsonOf(run.Error))

	for _, s := range api.mustSteps(runID) {
		require.Equal(t, client.StepStatusSucceeded, s.Status, "step %s", s.Key)
		attempts := api.mustAttempts(runID, s.Key)
		t.Logf("step %s: attempts %v", s.Key, attemptStatuses(attempts))
		for _, at := range attempts {
			require.NotEqual(t, client.AttemptStatusCanceled, at.Status, "step %s attempt %d", s.Key, at.Number)
			if at.Status == "failed" {
				// Only Cairn's own failures, which do not count.
				require.False(t, at.Counted, "step %s attempt %d: %s", s.Key, at.Number, jsonOf(at.Error))
				require.Equal(t, "infrastructure", errorOf(at.Error).Code)
			}
		}
	}
	for _, e := range api.events(runID) {
		require.NotContains(t, []string{"step.failed", "step.skipped", "run.failed", "run.canceled"}, e.Type, "event %d", e.Seq)
	}
	// The servers take new work too.
	for _, s := range []*server{a, b} {
		ping := s.api().startRun("pg-outage-ping", 0, nil)
		require.Equal(t, client.RunStatusSucceeded, s.api().waitRun(ping, 10*time.Second).Status)
	}
}

// TestBlobStoreOutage: the S3 server dies while steps produce outputs larger than
// the inline limit. Storing them fails with an infrastructure error, retried with
// backoff without using up max_attempts (1 here), and the run completes once S3 is
// back. The catalog never references a missing or partial object.
func TestBlobStoreOutage(t *testing.T) {
	t.Parallel()
	s3 := testenv.StartS3Process(t, "")
	// 5 MiB parts: an output over 5 MiB streams into S3 while the handler writes it;
	// a smaller one is stored when the handler has finished.
	const partSize = 5 << 20
	const bigSize = 12 << 20
	st := newStack(t, stackOptions{blobURL: s3.BlobURL(url.Values{"part_size": {itoa(partSize)}}), env: s3.Env()})
	a := st.start(serverOptions{name: "a", inlineLimit: 1024})
	api := a.api()

	gate := filepath.Join(st.dir, "gate")
	wait := "while [ ! -e " + gate + " ]; do sleep 0.05; done\n"
	api.deploy(map[string]string{
		"cairn.yaml": `name: s3-outage
steps:
  - key: warm
    exec: ["./bin/warm"]
  - key: small
    needs: [warm]
    exec: ["./bin/small"]
  - key: big
    needs: [warm]
    exec: ["./bin/big"]
  - key: join
    needs: [small, big]
    exec: ["./bin/join"]
`,
		// warm runs before the outage, so the bundle is in the server's cache.
		"bin/warm":  "#!/bin/bash\necho '{\"warm\":true}'\n",
		"bin/small": "#!/bin/bash\n" + wait + "seq 1 1000\n",
		"bin/big":   "#!/bin/bash\n" + wait + "seq 1 3000000 | head -c " + itoa(bigSize) + "\n",
		// join reads its inputs from the local files of their $blob references.
		"bin/join": `#!/bin/bash
read -r envelope
printf '{"sizes":['
sep=
for p in $(grep -o '"path":"[^"]*"' <<<"$envelope" | cut -d'"' -f4); do
  printf '%s%d' "$sep" "$(stat -c %s "$p")"
  sep=,
done
printf ']}\n'
`,
	})
	runID := api.startRun("s3-outage", 0, nil)
	for _, key := range []string{"small", "big"} {
		api.waitStep(runID, key, 20*time.Second, "running", func(s client.Step) bool { return s.Status == client.StepStatusRunning })
	}

	down := time.Now()
	s3.Kill()
	require.NoError(t, os.WriteFile(gate, nil, 0o644)) // the handlers write their outputs now
	// Wait for /readyz to report the blob store.
	require.Eventually(t, func() bool { return a.readyz() == http.StatusServiceUnavailable }, 10*time.Second, 50*time.Millisecond)
	// Keep S3 down until both steps have failed to store their output.
	for _, key := range []string{"small", "big"} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			as, err := api.attempts(runID, key)
			require.NoError(c, err)
			assert.True(c, slices.ContainsFunc(as, func(at client.Attempt) bool { return errorOf(at.Error).Code == "infrastructure" }),
				"attempts %s", jsonOf(as))
		}, 40*time.Second, 100*time.Millisecond, "step %s never failed to store its output", key)
	}
	s3.Start()
	t.Logf("S3 was down for %s", time.Since(down).Round(time.Millisecond))

	run := api.waitRun(runID, 45*time.Second)
	require.Equal(t, client.RunStatusSucceeded, run.Status, "run error: %s", jsonOf(run.Error))
	require.Equal(t, http.StatusOK, a.readyz())

	for _, key := range []string{"small", "big"} {
		step := api.mustStep(runID, key)
		require.EqualValues(t, 1, step.MaxAttempts)
		attempts := api.mustAttempts(runID, key)
		t.Logf("step %s: attempts %v", key, attemptStatuses(attempts))
		last := attempts[len(attempts)-1]
		require.Equal(t, client.AttemptStatusSucceeded, last.Status)
		for i, at := range attempts[:len(attempts)-1] {
			require.Equal(t, client.AttemptStatusFailed, at.Status)
			require.False(t, at.Counted, "an infrastructure failure must not use up an attempt")
			e := errorOf(at.Error)
			require.Equal(t, "infrastructure", e.Code, "%s", e.Message)
			require.True(t, e.Retryable)
			// Backoff of infrastructure failures: 1s, 2s, 4s, … after attempt 1, 2, 3, ….
			wait := attempts[i+1].StartedAt.Sub(*at.FinishedAt)
			require.GreaterOrEqual(t, wait, time.Duration(1<<i)*time.Second-10*time.Millisecond,
				"retry %d of %s came too early", i+1, key)
		}
	}

	// Every $blob the catalog references is whole in the bucket.
	store := s3.Store()
	refs := 0
	for _, s := range api.mustSteps(runID) {
		for _, v := range []any{s.Output, s.Checkpoint} {
			if ref, ok := blobstore.ParseRef(jsonOf(v)); ok {
				requireBlob(t, store, ref)
				refs++
			}
		}
	}
	require.Equal(t, 2, refs, "small and big are stored as blobs")

	var small, big bytes.Buffer
	writeSeq(&small, 1<<62, 1000)
	writeSeq(&big, bigSize, 0)
	require.Equal(t, small.String(), string(api.output(runID, "small")))
	require.True(t, bytes.Equal(big.Bytes(), api.output(runID, "big")), "output of big differs")
	// deps are in key order: big, small.
	require.JSONEq(t, `{"sizes":[`+itoa(big.Len())+`,`+itoa(small.Len())+`]}`, string(api.output(runID, "join")))
}

// writeSeq writes what `seq 1 last | head -c limit` prints; last 0 means no end.
func writeSeq(w io.Writer, limit int64, last int) {
	buf := make([]byte, 0, 64<<10)
	var written int64
	for i := 1; last == 0 || i <= last; i++ {
		buf = append(strconv.AppendInt(buf, int64(i), 10), '\n')
		if len(buf) < 60<<10 && i != last {
			continue
		}
		if written+int64(len(buf)) >= limit {
			_, _ = w.Write(buf[:limit-written])
			return
		}
		_, _ = w.Write(buf)
		written += int64(len(buf))
		buf = buf[:0]
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
