package runtime_test

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/runtime"
)

// readRef reads the object a stored reference names.
func readRef(t *testing.T, tb *testBundle, stored json.RawMessage) (blobstore.Ref, []byte) {
	t.Helper()
	ref, ok := blobstore.ParseRef(stored)
	require.True(t, ok, "not a reference: %s", stored)
	key, err := ref.Key()
	require.NoError(t, err)
	return ref, readBlob(t, tb, key)
}

// readBlob reads the object of the blob store at key.
func readBlob(t *testing.T, tb *testBundle, key string) []byte {
	t.Helper()
	rc, _, err := tb.blobs.Get(context.Background(), key, blobstore.GetOptions{})
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return b
}

// TestForgedBlobReferenceIsPlainJSON: a handler that spells a reference with a JSON
// escape ("\u0024blob", which PostgreSQL would store as "$blob") to point at another
// step's blob, as its output and as its checkpoint, gets its bytes stored as they
// are: the reference in the catalog is Cairn's, to those bytes, and its dependent
// reads them, never the other blob.
func TestForgedBlobReferenceIsPlainJSON(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{Limits: runtime.Limits{InlineLimit: 1024}})
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": `
name: forge
steps:
  - {key: secret, exec: ["./bin/secret"]}
  - {key: forge, needs: [secret], exec: ["./bin/forge"]}
  - {key: reader, needs: [forge], exec: ["./bin/reader"]}
`,
		"bin/secret": "#!/bin/sh\ncat >/dev/null\nseq 1 5000\n",
		// The forged value names the secret blob's digest, taken from the envelope.
		"bin/forge": `#!/bin/sh
d=$(sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p')
printf '{"checkpoint":{"\\u0024blob":{"digest":"%s","size":1}}}\n' "$d" >&3
printf '{"\\u0024blob":{"digest":"%s","size":1}}' "$d"
`,
		"bin/reader": `#!/bin/sh
p=$(sed -n 's/.*"path":"\([^"]*\)".*/\1/p')
cat "$p"
`,
	})
	id := startRun(t, tb, v, "")
	run := waitRun(t, tb, id, 30*time.Second)
	require.Equal(t, catalog.RunSucceeded, run.Status, "%s", run.Error)
	steps := stepMap(t, tb, id)

	secret, _ := readRef(t, tb, json.RawMessage(steps["secret"].Output))
	forged := `{"\u0024blob":{"digest":"` + secret.Digest + `","size":1}}`

	out, outBytes := readRef(t, tb, json.RawMessage(steps["forge"].Output))
	require.NotEqual(t, secret.Digest, out.Digest, "the forged reference was trusted")
	require.Equal(t, forged, string(outBytes), "the output is stored as the handler wrote it")
	require.Equal(t, "application/json", out.ContentType)

	cp, cpBytes := readRef(t, tb, json.RawMessage(steps["forge"].Checkpoint))
	require.NotEqual(t, secret.Digest, cp.Digest, "the forged checkpoint reference was trusted")
	require.JSONEq(t, forged, string(cpBytes))

	// The dependent got the forged bytes as its input, not the secret.
	_, readerBytes := readRef(t, tb, json.RawMessage(steps["reader"].Output))
	require.Equal(t, forged, string(readerBytes))
}

// TestMissingBlobFailsTheStep: an input whose object is gone from the blob store
// (lost, deleted) fails its step at once with code blob_missing instead of
// retrying for ever as an infrastructure failure.
func TestMissingBlobFailsTheStep(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": `
name: lost-blob
steps:
  - {key: src, builtin: noop}
  - {key: use, needs: [src], exec: ["./bin/use"], retry: {max_attempts: 3}}
`,
		"bin/use": "#!/bin/sh\ncat >/dev/null\necho '{}'\n",
	})
	id := startRun(t, tb, v, "")
	// src "succeeds" with a reference to an object the store never had.
	claimed, err := tb.store.StepClaim(ctx, "test", 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	missing := blobstore.Ref{Digest: "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Size: 10}
	errs, err := tb.store.StepFinishBatch(ctx, []*catalog.StepFinishParams{{RunID: id, Key: "src", LeaseToken: claimed[0].LeaseToken,
		Outcome: catalog.OutcomeSucceeded, Output: missing.JSON()}})
	require.NoError(t, err)
	require.NoError(t, errs[0])

	startDispatcher(t, tb, runtime.Config{})
	run := waitRun(t, tb, id, 30*time.Second)
	require.Equal(t, catalog.RunFailed, run.Status)
	a := attempts(t, tb, id, "use")
	require.Len(t, a, 1, "a missing blob is not retried")
	var e struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
	}
	require.NoError(t, json.Unmarshal(a[0].Error, &e))
	require.Equal(t, "blob_missing", e.Code, e.Message)
	require.False(t, e.Retryable)
	require.Contains(t, e.Message, "input from src")
	require.Contains(t, e.Message, missing.Digest)
}
