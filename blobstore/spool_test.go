package blobstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSpoolRoundTrip spools content whose end is not a whole block (the last
// write leaves direct I/O) and reads it back by sections, as a multipart upload
// does, seeking back as a retried part does: every byte comes back in place,
// and the digest is the content's.
func TestSpoolRoundTrip(t *testing.T) {
	for _, size := range []int{s3SmallRead + 1, 3*s3SmallRead + 12345, 5 * s3SmallRead} {
		content := make([]byte, size)
		rng := rand.New(rand.NewPCG(uint64(size), 1))
		for i := range content {
			content[i] = byte(rng.Uint32())
		}
		hr := newHashingReader(bytes.NewReader(content), -1)
		first := make([]byte, s3SmallRead)
		_, err := io.ReadFull(hr, first) // hashed, as readSmall does
		require.NoError(t, err)

		spool, err := newSpoolFile(t.TempDir())
		require.NoError(t, err)
		t.Logf("size %d: direct I/O %v", size, spool.direct)
		require.NoError(t, spoolRest(context.Background(), spool, hr, first))
		require.Equal(t, int64(size), hr.n)
		want := sha256.Sum256(content)
		require.Equal(t, want[:], hr.h.Sum(nil), "digest")

		part := int64(2*s3SmallRead + 4096)
		buf := alignedBuffer(s3SmallRead)
		for off := int64(0); off < int64(size); off += part {
			n := min(part, int64(size)-off)
			r := spool.reader(off, n, buf)
			half := make([]byte, n/2)
			_, err := io.ReadFull(r, half)
			require.NoError(t, err)
			pos, err := r.Seek(0, io.SeekStart) // a retry sends the part again
			require.NoError(t, err)
			require.Zero(t, pos)
			got, err := io.ReadAll(r)
			require.NoError(t, err)
			require.True(t, bytes.Equal(content[off:off+n], got), "section at %d", off)
		}
		require.NoError(t, spool.Close())
	}
}

// TestSpoolStopsOnReadError: a reader that fails mid-way fails the spooling
// with its error, and no goroutine is left blocked.
func TestSpoolStopsOnReadError(t *testing.T) {
	broken := io.MultiReader(bytes.NewReader(make([]byte, 3*s3SmallRead)), errReader{io.ErrUnexpectedEOF})
	hr := newHashingReader(broken, -1)
	first := make([]byte, s3SmallRead)
	_, err := io.ReadFull(hr, first)
	require.NoError(t, err)
	spool, err := newSpoolFile(t.TempDir())
	require.NoError(t, err)
	defer spool.Close()
	require.ErrorIs(t, spoolRest(context.Background(), spool, hr, first), io.ErrUnexpectedEOF)
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
