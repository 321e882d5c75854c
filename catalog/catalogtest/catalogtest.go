// Package catalogtest builds catalog rows for tests, as River's testfactory does:
// rows that production makes through a longer path (a bundle upload) made in one
// call, with what the test cares about and stand-ins for the rest. It is imported
// by tests only.
package catalogtest

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
)

// Version registers the next version of workflow, whose runs start with steps, and
// returns it; it fails the test on an error. Steps is the layout that
// internal/deploy.Register builds from a bundle's definition: keys, needs and
// attempts; none means runs without steps.
//
// Its bundle is a stand-in: a random digest (each call is a new version), size 1,
// a blob key with no object behind it, and the definition {}. A test that runs the
// steps (a dispatcher reads the bundle) deploys a real bundle with
// internal/deploy.Register instead. Version uses t.Context() and is safe for
// concurrent use.
func Version(t testing.TB, store *catalog.Store, workflow string, steps ...catalog.NewStep) *catalog.Version {
	t.Helper()
	var sum [32]byte
	_, _ = rand.Read(sum[:]) // never fails (crypto/rand)
	hexDigest := hex.EncodeToString(sum[:])
	digest := "sha256:" + hexDigest
	v, created, err := store.VersionRegister(t.Context(), &catalog.VersionRegisterParams{
		Workflow: workflow, Digest: digest, Size: 1, BlobKey: "bundles/sha256/" + hexDigest,
		Definition: []byte(`{}`), Fingerprint: digest, Steps: steps,
	})
	require.NoError(t, err, "register a version of %s", workflow)
	require.True(t, created, "register a version of %s", workflow)
	return v
}
