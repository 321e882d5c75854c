package blobstore_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
)

// TestPutPayload: the one rule by which outputs, checkpoints, signals and
// callbacks are stored. A value stays inline only when it is JSON within the
// limit that cannot read as a reference; anything else is an object, whose
// reference names exactly the bytes given.
func TestPutPayload(t *testing.T) {
	t.Parallel()
	errRefused := errors.New("refused")
	for _, tc := range []struct {
		name   string
		value  string
		opts   blobstore.PayloadOptions
		inline string // the stored value when inline
		ct     string // else the object's content type
		err    error
	}{
		{name: "small JSON is inline, trimmed", value: " {\"a\": 1}\n", inline: `{"a": 1}`},
		{name: "at the limit is inline", value: `"12345678901234"`, inline: `"12345678901234"`},
		{name: "over the limit is an object", value: `"123456789012345"`, ct: "application/octet-stream"},
		{name: "a mention of $blob is an object", value: `{"\u0024blob":1}`, ct: "application/json"},
		{name: "invalid JSON is an object", value: `{"a":`, ct: "application/octet-stream"},
		{name: "bytes are an object", value: `1`, opts: blobstore.PayloadOptions{Bytes: true}, ct: "application/octet-stream"},
		{name: "the content type given", value: `"123456789012345"`, opts: blobstore.PayloadOptions{ContentType: "text/plain"}, ct: "text/plain"},
		{name: "check refuses", value: `1`, opts: blobstore.PayloadOptions{Check: func([]byte) error { return errRefused }}, err: errRefused},
		{name: "check sees only what may be inline", value: `"123456789012345"`, opts: blobstore.PayloadOptions{Check: func([]byte) error { return errRefused }}, ct: "application/octet-stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, err := blobstore.NewFile(t.TempDir(), nil)
			require.NoError(t, err)
			opts := tc.opts
			opts.InlineLimit = 16
			stored, err := blobstore.PutPayload(ctx, s, strings.NewReader(tc.value), opts)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				for l, err := range s.List(ctx, blobstore.KindPayloads) {
					require.NoError(t, err)
					require.Fail(t, "nothing is stored", "found %s", l.Key)
				}
				return
			}
			require.NoError(t, err)
			ref, isRef := blobstore.ParseRef(stored)
			if tc.inline != "" {
				require.False(t, isRef)
				require.Equal(t, tc.inline, string(stored))
				return
			}
			require.True(t, isRef, "%s", stored)
			require.Equal(t, tc.ct, ref.ContentType)
			key, err := ref.Key()
			require.NoError(t, err)
			r, obj, err := s.Get(ctx, key, blobstore.GetOptions{})
			require.NoError(t, err)
			defer r.Close()
			b, err := io.ReadAll(r)
			require.NoError(t, err)
			require.Equal(t, tc.value, string(b))
			require.Equal(t, int64(len(tc.value)), obj.Size)
		})
	}
}
