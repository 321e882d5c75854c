package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/internal/testenv"
)

// TestLargeOutput: an exec step writes 1 GiB to stdout. The step completes, GET
// …/output returns the same bytes, and the dispatcher streams them into S3 once,
// under a key of their own, without holding them: its peak RSS stays under 128
// MiB.
//
// Not parallel: it measures the server's memory and takes the machine's disk and
// CPU for a while.
func TestLargeOutput(t *testing.T) {
	const size = 1 << 30
	const maxRSS = 128 << 20
	// A versitygw of its own, on a RAM disk when there is one: storing 1 GiB on
	// versitygw's posix backend writes it three times (the parts, their
	// concatenation, the copy to its final key), which this machine's disk takes
	// well over a minute for. The guarantee is about the dispatcher, not the disk.
	s3 := testenv.StartS3Process(t, memoryDir(t, 4<<30))
	st := newStack(t, stackOptions{blobURL: s3.BlobURL(nil), env: s3.Env()})
	s := st.start(serverOptions{name: "a"})
	api := s.api()
	api.deploy(map[string]string{
		"cairn.yaml": `name: large
steps:
  - key: big
    exec: ["./bin/big"]
    timeout: 2m
`,
		// Numbers, one per line: cheap to make, and a lost, repeated or reordered
		// chunk changes the hash (zeros would not tell).
		"bin/big": "#!/bin/bash\nseq 1 200000000 | head -c " + itoa(size) + "\n",
	})

	// The expected digest, computed while the server works.
	want := make(chan string, 1)
	go func() {
		h := sha256.New()
		writeSeq(h, size, 0)
		want <- "sha256:" + hex.EncodeToString(h.Sum(nil))
	}()

	began := time.Now()
	runID := api.startRun("large", 0, nil)
	run := api.waitRun(runID, 100*time.Second) // ~20 s on a quiet 2-core machine
	require.Equal(t, client.RunStatusSucceeded, run.Status, "run error: %s", jsonOf(run.Error))
	t.Logf("1 GiB output stored in %s", time.Since(began).Round(time.Millisecond))
	digest := <-want

	ref, ok := blobstore.ParseRef(jsonOf(api.mustStep(runID, "big").Output))
	require.True(t, ok, "the output is a $blob reference")
	require.Equal(t, int64(size), ref.Size)
	require.Equal(t, digest, ref.Digest)
	require.Regexp(t, `^payloads/u/[0-9a-f]{64}$`, ref.ObjectKey, "written once, under a key of its own")

	ctx, cancel := withTimeout(time.Minute)
	defer cancel()
	output, err := api.openOutput(ctx, runID, "big")
	require.NoError(t, err)
	defer output.Close()
	h := sha256.New()
	n, err := io.Copy(h, output)
	require.NoError(t, err)
	require.Equal(t, int64(size), n)
	require.Equal(t, digest, "sha256:"+hex.EncodeToString(h.Sum(nil)), "GET …/output returned other bytes")

	peak := s.peakRSS()
	t.Logf("peak RSS of the server: %.1f MiB (limit %d MiB)", float64(peak)/(1<<20), maxRSS>>20)
	require.Less(t, peak, int64(maxRSS))
}
