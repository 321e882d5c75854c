package runtime

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
)

// TestLimitedReaderCountsBytesRead: a checkpoint file is bounded by the bytes
// read, whatever its size says: a pipe (size 0) that gives one byte more than the
// limit fails the blob store's Put, and nothing is stored; one that gives the limit
// exactly is stored whole.
func TestLimitedReaderCountsBytesRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	const limit = 100_000
	put := func(n int) (*limitedReader, error) {
		pr, pw, err := os.Pipe()
		require.NoError(t, err)
		defer pr.Close()
		info, err := pr.Stat()
		require.NoError(t, err)
		require.Zero(t, info.Size(), "a pipe says nothing of its size")
		go func() {
			_, _ = io.Copy(pw, bytes.NewReader(make([]byte, n)))
			pw.Close()
		}()
		r := &limitedReader{r: pr, left: limit}
		_, err = store.Put(ctx, blobstore.KindPayloads, r, blobstore.PutOptions{Size: -1})
		return r, err
	}
	r, err := put(limit + 1)
	require.ErrorIs(t, err, errOverLimit)
	require.True(t, r.over)
	for o, err := range store.List(ctx, blobstore.KindPayloads) {
		require.NoError(t, err)
		t.Fatalf("nothing may be stored, found %s", o.Key)
	}

	r, err = put(limit)
	require.NoError(t, err)
	require.False(t, r.over)
}
