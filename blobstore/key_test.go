package blobstore_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
)

func TestKeyFor(t *testing.T) {
	t.Parallel()
	hex64 := strings.Repeat("0f", 32)
	tests := []struct {
		name    string
		kind    string
		digest  string
		want    string
		wantErr bool
	}{
		{name: "Valid", kind: "bundles", digest: "sha256:" + hex64, want: "bundles/sha256/" + hex64},
		{name: "KindWithDigitsAndDash", kind: "a1-b", digest: "sha256:" + hex64, want: "a1-b/sha256/" + hex64},
		{name: "LongestKind", kind: strings.Repeat("k", 32), digest: "sha256:" + hex64, want: strings.Repeat("k", 32) + "/sha256/" + hex64},
		{name: "KindTooLong", kind: strings.Repeat("k", 33), digest: "sha256:" + hex64, wantErr: true},
		{name: "EmptyKind", kind: "", digest: "sha256:" + hex64, wantErr: true},
		{name: "KindWithSlash", kind: "a/b", digest: "sha256:" + hex64, wantErr: true},
		{name: "KindDots", kind: "..", digest: "sha256:" + hex64, wantErr: true},
		{name: "UpperKind", kind: "Bundles", digest: "sha256:" + hex64, wantErr: true},
		{name: "DigitFirst", kind: "1x", digest: "sha256:" + hex64, wantErr: true},
		{name: "NoPrefix", kind: "bundles", digest: hex64, wantErr: true},
		{name: "UpperHex", kind: "bundles", digest: "sha256:" + strings.ToUpper(hex64), wantErr: true},
		{name: "ShortHex", kind: "bundles", digest: "sha256:" + hex64[1:], wantErr: true},
		{name: "OtherAlgorithm", kind: "bundles", digest: "sha512:" + hex64, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := blobstore.KeyFor(tt.kind, tt.digest)
			if tt.wantErr {
				require.ErrorIs(t, err, blobstore.ErrInvalidKey)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)

			kind, digest, err := blobstore.ParseKey(got)
			require.NoError(t, err)
			require.Equal(t, tt.kind, kind)
			require.Equal(t, tt.digest, digest)
		})
	}
}

// FuzzParseKey checks that ParseKey accepts exactly what KeyFor builds and the
// names of their own "<kind>/u/<hex>": any key it accepts is rebuilt
// identically, so it is a safe relative path.
func FuzzParseKey(f *testing.F) {
	hex64 := strings.Repeat("ab", 32)
	for _, seed := range []string{
		"bundles/sha256/" + hex64,
		"../x",
		"bundles/sha256/zz",
		"bundles/sha256/" + hex64 + "/../../etc",
		"a/sha256/" + hex64,
		"payloads/u/" + hex64,
		"payloads/u/" + hex64 + "/sha256/" + hex64,
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		kind, digest, err := blobstore.ParseKey(key)
		if err != nil {
			require.ErrorIs(t, err, blobstore.ErrInvalidKey)
			return
		}
		_, hexName, unique, err := blobstore.SplitKey(key)
		require.NoError(t, err)
		require.Equal(t, unique, digest == "")
		rebuilt := kind + "/u/" + hexName
		if !unique {
			rebuilt, err = blobstore.KeyFor(kind, digest)
			require.NoError(t, err)
		}
		require.Equal(t, key, rebuilt)
		require.NotContains(t, key, "..")
		require.False(t, strings.HasPrefix(key, "/"))
	})
}
