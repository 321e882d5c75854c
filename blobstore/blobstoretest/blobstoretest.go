// Package blobstoretest is the conformance suite every blobstore.Store backend
// passes: Exercise runs the contract's tests, LargeStream the memory bound on a
// big stream of unknown length.
package blobstoretest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
)

// Exercise runs the conformance suite against the stores newStore returns. Each
// subtest runs in parallel and calls newStore once for a store of its own (an
// empty directory, a fresh bucket); newStore must register its own cleanup.
func Exercise(t *testing.T, newStore func(t *testing.T) blobstore.Store) {
	t.Helper()

	t.Run("ClaimBeforeLooking", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		content := []byte("claimed content")
		var claimed []string
		claim := func(_ context.Context, key string) error {
			claimed = append(claimed, key)
			return nil
		}
		obj, err := s.Put(ctx, "payloads", bytes.NewReader(content), blobstore.PutOptions{Claim: claim})
		require.NoError(t, err)
		require.Equal(t, []string{obj.Key}, claimed, "a new object's key is claimed")
		_, err = s.Put(ctx, "payloads", bytes.NewReader(content), blobstore.PutOptions{Claim: claim})
		require.NoError(t, err)
		require.Equal(t, []string{obj.Key, obj.Key}, claimed, "so is one already stored")

		address := digestOf([]byte("tree"))
		bundle, err := s.Put(ctx, "bundles", bytes.NewReader(content), blobstore.PutOptions{Digest: address, Claim: claim})
		require.NoError(t, err)
		_, err = s.Put(ctx, "bundles", failingReader{}, blobstore.PutOptions{Digest: address, Claim: claim})
		require.NoError(t, err)
		require.Equal(t, []string{obj.Key, obj.Key, bundle.Key, bundle.Key}, claimed, "a fixed address is claimed once a Put")

		refused := errors.New("refused")
		other := []byte("refused content")
		_, err = s.Put(ctx, "payloads", bytes.NewReader(other), blobstore.PutOptions{
			Claim: func(context.Context, string) error { return refused }})
		require.ErrorIs(t, err, refused)
		key, err := blobstore.KeyFor("payloads", digestOf(other))
		require.NoError(t, err)
		_, err = s.Stat(ctx, key)
		require.ErrorIs(t, err, blobstore.ErrNotFound, "a refused claim stores nothing")
	})

	t.Run("List", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		l, ok := s.(blobstore.Lister)
		require.True(t, ok, "the store lists its objects (blobstore.Lister)")
		before := time.Now().Add(-time.Minute)
		want := map[string]int64{}
		for i := range 3 {
			obj, err := s.Put(ctx, "payloads", bytes.NewReader(Bytes(100+i, uint64(i))), blobstore.PutOptions{})
			require.NoError(t, err)
			want[obj.Key] = obj.Size
		}
		_, err := s.Put(ctx, "logs", strings.NewReader("another kind"), blobstore.PutOptions{})
		require.NoError(t, err)
		got := map[string]int64{}
		for o, err := range l.List(ctx, "payloads") {
			require.NoError(t, err)
			require.True(t, o.ModTime.After(before), "%s: mod time %s", o.Key, o.ModTime)
			got[o.Key] = o.Size
		}
		require.Equal(t, want, got)
		for _, err := range l.List(ctx, "archives") {
			require.NoError(t, err)
			t.Error("an empty kind lists nothing")
		}
		rep, err := l.CleanTemp(ctx, time.Now().Add(-time.Hour), false)
		require.NoError(t, err)
		require.Equal(t, blobstore.TempReport{}, rep, "no leftovers")
	})

	t.Run("PutGetRoundTrip", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		content := Bytes(100<<10, 1)

		obj, err := s.Put(ctx, "outputs", bytes.NewReader(content), blobstore.PutOptions{})
		require.NoError(t, err)
		digest := digestOf(content)
		require.Equal(t, blobstore.Object{
			Key:         "outputs/sha256/" + strings.TrimPrefix(digest, "sha256:"),
			Digest:      digest,
			SHA256:      digest,
			Size:        int64(len(content)),
			ContentType: blobstore.DefaultContentType,
		}, obj)

		got, gotObj := get(ctx, t, s, obj.Key, blobstore.GetOptions{})
		require.Equal(t, content, got)
		require.Equal(t, obj, gotObj)
	})

	t.Run("DigestOfContent", func(t *testing.T) {
		t.Parallel()
		// Sizes around the buffers backends switch on: 1 MiB (S3's small read)
		// and S3's default part size, each with the size known and not.
		tests := []struct {
			name string
			size int
		}{
			{name: "Empty", size: 0},
			{name: "OneByte", size: 1},
			{name: "OneMiB", size: 1 << 20},
			{name: "OneMiBPlusOne", size: 1<<20 + 1},
			{name: "OnePart", size: blobstore.DefaultPartSize},
			{name: "OnePartPlusOne", size: blobstore.DefaultPartSize + 1},
			{name: "ThreeParts", size: 2*blobstore.DefaultPartSize + 7},
		}
		for _, tt := range tests {
			for _, known := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/known=%t", tt.name, known), func(t *testing.T) {
					t.Parallel()
					ctx, s := setup(t, newStore)
					content := Bytes(tt.size, uint64(tt.size))
					opts := blobstore.PutOptions{Size: -1}
					if known {
						opts.Size = int64(tt.size)
					}

					obj, err := s.Put(ctx, "outputs", onlyReader{bytes.NewReader(content)}, opts)
					require.NoError(t, err)
					require.Equal(t, digestOf(content), obj.Digest)
					require.Equal(t, digestOf(content), obj.SHA256)
					require.Equal(t, int64(tt.size), obj.Size)

					rc, gotObj, err := s.Get(ctx, obj.Key, blobstore.GetOptions{})
					require.NoError(t, err)
					defer rc.Close()
					h := sha256.New()
					n, err := io.Copy(h, rc)
					require.NoError(t, err)
					require.Equal(t, int64(tt.size), n)
					require.Equal(t, obj.Digest, "sha256:"+hex.EncodeToString(h.Sum(nil)))
					require.Equal(t, obj, gotObj)
				})
			}
		}
	})

	t.Run("SizeMismatch", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		content := Bytes(2<<20, 2)
		for _, size := range []int64{1, int64(len(content)) - 1, int64(len(content)) + 1, 3 << 20} {
			_, err := s.Put(ctx, "outputs", bytes.NewReader(content), blobstore.PutOptions{Size: size})
			require.ErrorIs(t, err, blobstore.ErrSizeMismatch, "size %d", size)
		}
		_, err := s.Stat(ctx, keyOf("outputs", content))
		require.ErrorIs(t, err, blobstore.ErrNotFound, "nothing is stored")
	})

	t.Run("IdempotentPut", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		content := Bytes(3000, 3)

		first, err := s.Put(ctx, "logs", bytes.NewReader(content), blobstore.PutOptions{ContentType: "text/plain"})
		require.NoError(t, err)
		second, err := s.Put(ctx, "logs", bytes.NewReader(content), blobstore.PutOptions{ContentType: "application/json"})
		require.NoError(t, err)
		require.Equal(t, first, second, "the existing object, its content type kept")

		got, _ := get(ctx, t, s, first.Key, blobstore.GetOptions{})
		require.Equal(t, content, got)
	})

	t.Run("DigestOverride", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		content := Bytes(5000, 4)
		address := digestOf([]byte("the canonical tree"))

		obj, err := s.Put(ctx, "bundles", bytes.NewReader(content), blobstore.PutOptions{Digest: address, ContentType: "application/gzip"})
		require.NoError(t, err)
		require.Equal(t, blobstore.Object{
			Key:         "bundles/sha256/" + strings.TrimPrefix(address, "sha256:"),
			Digest:      address,
			SHA256:      digestOf(content),
			Size:        int64(len(content)),
			ContentType: "application/gzip",
		}, obj)

		stat, err := s.Stat(ctx, obj.Key)
		require.NoError(t, err)
		require.Equal(t, obj, stat)
		got, gotObj := get(ctx, t, s, obj.Key, blobstore.GetOptions{})
		require.Equal(t, content, got)
		require.Equal(t, obj, gotObj)

		// Stored already: the reader is not even read.
		again, err := s.Put(ctx, "bundles", failingReader{}, blobstore.PutOptions{Digest: address})
		require.NoError(t, err)
		require.Equal(t, obj, again)

		// The content's own key holds nothing.
		_, err = s.Stat(ctx, keyOf("bundles", content))
		require.ErrorIs(t, err, blobstore.ErrNotFound)
	})

	t.Run("VerifyDigest", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		content := Bytes(7000, 5)
		wrong := digestOf([]byte("something else"))

		_, err := s.Put(ctx, "checkpoints", bytes.NewReader(content), blobstore.PutOptions{Digest: wrong, VerifyDigest: true})
		require.ErrorIs(t, err, blobstore.ErrDigestMismatch)
		_, err = s.Stat(ctx, "checkpoints/sha256/"+strings.TrimPrefix(wrong, "sha256:"))
		require.ErrorIs(t, err, blobstore.ErrNotFound, "nothing is stored")

		obj, err := s.Put(ctx, "checkpoints", bytes.NewReader(content), blobstore.PutOptions{Digest: digestOf(content), VerifyDigest: true})
		require.NoError(t, err)
		require.Equal(t, keyOf("checkpoints", content), obj.Key)

		_, err = s.Put(ctx, "checkpoints", bytes.NewReader(content), blobstore.PutOptions{VerifyDigest: true})
		require.ErrorIs(t, err, blobstore.ErrInvalidKey, "VerifyDigest without Digest")
	})

	t.Run("Ranges", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		content := Bytes(1000, 6)
		obj, err := s.Put(ctx, "outputs", bytes.NewReader(content), blobstore.PutOptions{})
		require.NoError(t, err)
		size := int64(len(content))

		tests := []struct {
			name    string
			opts    blobstore.GetOptions
			want    []byte
			wantErr error
		}{
			{name: "Whole", opts: blobstore.GetOptions{}, want: content},
			{name: "Offset", opts: blobstore.GetOptions{Offset: 10}, want: content[10:]},
			{name: "OffsetLength", opts: blobstore.GetOptions{Offset: 10, Length: 5}, want: content[10:15]},
			{name: "FirstByte", opts: blobstore.GetOptions{Length: 1}, want: content[:1]},
			{name: "Prefix", opts: blobstore.GetOptions{Length: 100}, want: content[:100]},
			{name: "LastByte", opts: blobstore.GetOptions{Offset: size - 1}, want: content[size-1:]},
			{name: "LengthPastEnd", opts: blobstore.GetOptions{Offset: size - 3, Length: 10}, want: content[size-3:]},
			{name: "HugeLength", opts: blobstore.GetOptions{Offset: 1, Length: 1<<63 - 1}, want: content[1:]},
			{name: "OffsetAtEnd", opts: blobstore.GetOptions{Offset: size}, want: []byte{}},
			{name: "OffsetAtEndWithLength", opts: blobstore.GetOptions{Offset: size, Length: 5}, want: []byte{}},
			{name: "OffsetPastEnd", opts: blobstore.GetOptions{Offset: size + 1}, wantErr: blobstore.ErrInvalidRange},
			{name: "NegativeOffset", opts: blobstore.GetOptions{Offset: -1}, wantErr: blobstore.ErrInvalidRange},
			{name: "NegativeLength", opts: blobstore.GetOptions{Length: -1}, wantErr: blobstore.ErrInvalidRange},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				rc, gotObj, err := s.Get(ctx, obj.Key, tt.opts)
				if tt.wantErr != nil {
					require.ErrorIs(t, err, tt.wantErr)
					return
				}
				require.NoError(t, err)
				defer rc.Close()
				got, err := io.ReadAll(rc)
				require.NoError(t, err)
				require.Equal(t, tt.want, append([]byte{}, got...))
				require.Equal(t, obj, gotObj, "the Object describes the whole object")
			})
		}
	})

	t.Run("RangesOfEmptyObject", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		obj, err := s.Put(ctx, "outputs", strings.NewReader(""), blobstore.PutOptions{})
		require.NoError(t, err)
		for _, opts := range []blobstore.GetOptions{{}, {Length: 5}, {Offset: 0, Length: 1}} {
			got, gotObj := get(ctx, t, s, obj.Key, opts)
			require.Empty(t, got)
			require.Equal(t, obj, gotObj)
		}
		_, _, err = s.Get(ctx, obj.Key, blobstore.GetOptions{Offset: 1})
		require.ErrorIs(t, err, blobstore.ErrInvalidRange)
	})

	t.Run("Stat", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		content := Bytes(4321, 7)
		obj, err := s.Put(ctx, "outputs", bytes.NewReader(content), blobstore.PutOptions{ContentType: "application/json"})
		require.NoError(t, err)

		stat, err := s.Stat(ctx, obj.Key)
		require.NoError(t, err)
		require.Equal(t, obj, stat)
		require.Equal(t, int64(4321), stat.Size)
		require.Equal(t, "application/json", stat.ContentType)
	})

	t.Run("Delete", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		content := Bytes(2000, 8)
		obj, err := s.Put(ctx, "outputs", bytes.NewReader(content), blobstore.PutOptions{ContentType: "text/plain"})
		require.NoError(t, err)

		require.NoError(t, s.Delete(ctx, obj.Key))
		_, err = s.Stat(ctx, obj.Key)
		require.ErrorIs(t, err, blobstore.ErrNotFound)
		_, _, err = s.Get(ctx, obj.Key, blobstore.GetOptions{})
		require.ErrorIs(t, err, blobstore.ErrNotFound)

		require.NoError(t, s.Delete(ctx, obj.Key), "deleting an absent object")
		require.NoError(t, s.Delete(ctx, keyOf("outputs", []byte("never stored"))))

		// Stored again after a delete, it is whole again, metadata included.
		again, err := s.Put(ctx, "outputs", bytes.NewReader(content), blobstore.PutOptions{ContentType: "text/csv"})
		require.NoError(t, err)
		require.Equal(t, "text/csv", again.ContentType)
		got, gotObj := get(ctx, t, s, obj.Key, blobstore.GetOptions{})
		require.Equal(t, content, got)
		require.Equal(t, again, gotObj)
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		key := keyOf("outputs", []byte("absent"))

		_, _, err := s.Get(ctx, key, blobstore.GetOptions{})
		require.ErrorIs(t, err, blobstore.ErrNotFound)
		_, _, err = s.Get(ctx, key, blobstore.GetOptions{Offset: 3, Length: 2})
		require.ErrorIs(t, err, blobstore.ErrNotFound)
		_, err = s.Stat(ctx, key)
		require.ErrorIs(t, err, blobstore.ErrNotFound)
	})

	t.Run("InvalidKey", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		hex64 := strings.Repeat("ab", 32)
		keys := []string{
			"",
			"../x",
			"bundles/sha256/zz",
			"bundles/sha256/" + strings.ToUpper(hex64),
			"bundles/sha256/" + hex64 + "/x",
			"bundles/sha256/" + hex64 + ".meta",
			"../bundles/sha256/" + hex64,
			"/bundles/sha256/" + hex64,
			"bundles/md5/" + hex64,
			"Bundles/sha256/" + hex64,
			".tmp/sha256/" + hex64,
			strings.Repeat("a", 33) + "/sha256/" + hex64,
		}
		for _, key := range keys {
			_, _, err := s.Get(ctx, key, blobstore.GetOptions{})
			require.ErrorIs(t, err, blobstore.ErrInvalidKey, "Get %q", key)
			_, err = s.Stat(ctx, key)
			require.ErrorIs(t, err, blobstore.ErrInvalidKey, "Stat %q", key)
			require.ErrorIs(t, s.Delete(ctx, key), blobstore.ErrInvalidKey, "Delete %q", key)
			_, err = s.PresignGet(ctx, key, time.Minute)
			require.ErrorIs(t, err, blobstore.ErrInvalidKey, "PresignGet %q", key)
		}

		for _, kind := range []string{"", "Bundles", "../x", "a/b", ".tmp", "1abc", "a_b", strings.Repeat("a", 33)} {
			_, err := s.Put(ctx, kind, strings.NewReader("x"), blobstore.PutOptions{})
			require.ErrorIs(t, err, blobstore.ErrInvalidKey, "kind %q", kind)
		}
		for _, digest := range []string{"abc", "sha256:zz", "md5:" + hex64, "sha256:" + strings.ToUpper(hex64), hex64} {
			_, err := s.Put(ctx, "bundles", strings.NewReader("x"), blobstore.PutOptions{Digest: digest})
			require.ErrorIs(t, err, blobstore.ErrInvalidKey, "digest %q", digest)
		}
	})

	t.Run("ConcurrentPuts", func(t *testing.T) {
		t.Parallel()
		// Small content goes in one request; large content (past a part)
		// races through temporary objects on S3.
		for _, size := range []int{64 << 10, blobstore.DefaultPartSize + 1<<20} {
			t.Run(fmt.Sprintf("size=%d", size), func(t *testing.T) {
				t.Parallel()
				ctx, s := setup(t, newStore)
				content := Bytes(size, 9)
				const writers = 8
				objs := make([]blobstore.Object, writers)
				errs := make([]error, writers)
				var wg sync.WaitGroup
				for i := range writers {
					wg.Go(func() {
						objs[i], errs[i] = s.Put(ctx, "outputs", onlyReader{bytes.NewReader(content)}, blobstore.PutOptions{})
					})
				}
				wg.Wait()
				for i := range writers {
					require.NoError(t, errs[i], "writer %d", i)
					require.Equal(t, objs[0], objs[i], "writer %d", i)
				}
				require.Equal(t, keyOf("outputs", content), objs[0].Key)
				got, _ := get(ctx, t, s, objs[0].Key, blobstore.GetOptions{})
				require.True(t, bytes.Equal(content, got), "content read back")
			})
		}
	})

	t.Run("EmptyObject", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		const emptySHA256 = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

		for _, size := range []int64{0, -1} {
			obj, err := s.Put(ctx, "outputs", strings.NewReader(""), blobstore.PutOptions{Size: size})
			require.NoError(t, err)
			require.Equal(t, emptySHA256, obj.Digest)
			require.Equal(t, int64(0), obj.Size)
			got, gotObj := get(ctx, t, s, obj.Key, blobstore.GetOptions{})
			require.Empty(t, got)
			require.Equal(t, obj, gotObj)
		}
	})

	t.Run("ContentType", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		tests := []struct {
			name        string
			contentType string
			want        string
			size        int
		}{
			{name: "Default", contentType: "", want: blobstore.DefaultContentType, size: 10},
			{name: "JSON", contentType: "application/json", want: "application/json", size: 11},
			{name: "WithParameters", contentType: "text/plain; charset=utf-8", want: "text/plain; charset=utf-8", size: 12},
			{name: "Large", contentType: "application/x-ndjson", want: "application/x-ndjson", size: 17 << 20},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				content := Bytes(tt.size, uint64(tt.size))
				obj, err := s.Put(ctx, "outputs", onlyReader{bytes.NewReader(content)}, blobstore.PutOptions{ContentType: tt.contentType})
				require.NoError(t, err)
				require.Equal(t, tt.want, obj.ContentType)
				stat, err := s.Stat(ctx, obj.Key)
				require.NoError(t, err)
				require.Equal(t, tt.want, stat.ContentType)
				rc, gotObj, err := s.Get(ctx, obj.Key, blobstore.GetOptions{Offset: 1})
				require.NoError(t, err)
				require.NoError(t, rc.Close())
				require.Equal(t, tt.want, gotObj.ContentType)
			})
		}
	})

	t.Run("PresignGet", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		content := Bytes(70<<10, 10)
		obj, err := s.Put(ctx, "outputs", bytes.NewReader(content), blobstore.PutOptions{})
		require.NoError(t, err)

		u, err := s.PresignGet(ctx, obj.Key, time.Minute)
		if errors.Is(err, blobstore.ErrNotSupported) {
			t.Log("backend has no presigned URLs")
			return
		}
		require.NoError(t, err)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", got)
		require.Equal(t, content, got)
	})

	t.Run("Ping", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		require.NoError(t, s.Ping(ctx))
	})

	t.Run("WriteOnceWithIndex", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		idx := NewIndex()
		claims := &claimLog{}
		content := Bytes(2*blobstore.DefaultPartSize+7, 12) // three parts
		opts := blobstore.PutOptions{Size: -1, ContentType: "text/plain", Claim: claims.claim, Index: idx}

		first, err := s.Put(ctx, "payloads", onlyReader{bytes.NewReader(content)}, opts)
		require.NoError(t, err)
		require.Equal(t, digestOf(content), first.Digest)
		require.Equal(t, digestOf(content), first.SHA256)
		require.Equal(t, int64(len(content)), first.Size)
		require.Contains(t, claims.keys(), first.Key, "the stored key is claimed")
		key, err := blobstore.ObjectRef(first).Key()
		require.NoError(t, err)
		require.Equal(t, first.Key, key, "its reference names it")
		got, gotObj := get(ctx, t, s, first.Key, blobstore.GetOptions{})
		require.True(t, bytes.Equal(content, got), "the stored bytes are the content")
		require.Equal(t, first.Size, gotObj.Size)
		require.Equal(t, "text/plain", gotObj.ContentType)

		// Equal content is stored once: the second Put returns the first object.
		opts.ContentType = "application/json"
		second, err := s.Put(ctx, "payloads", onlyReader{bytes.NewReader(content)}, opts)
		require.NoError(t, err)
		require.Equal(t, first, second)
		l := s.(blobstore.Lister)
		var listed []string
		for o, err := range l.List(ctx, "payloads") {
			require.NoError(t, err)
			listed = append(listed, o.Key)
		}
		require.Equal(t, []string{first.Key}, listed, "one object holds the content")
		rep, err := l.CleanTemp(ctx, time.Now().Add(time.Hour), true)
		require.NoError(t, err)
		require.Equal(t, blobstore.TempReport{}, rep, "no upload or temporary object is left")

		// An object recorded in the index but collected since is not used: the
		// content is stored again.
		require.NoError(t, s.Delete(ctx, first.Key))
		third, err := s.Put(ctx, "payloads", onlyReader{bytes.NewReader(content)}, opts)
		require.NoError(t, err)
		got, _ = get(ctx, t, s, third.Key, blobstore.GetOptions{})
		require.True(t, bytes.Equal(content, got), "stored again")
	})

	t.Run("CanceledContext", func(t *testing.T) {
		t.Parallel()
		ctx, s := setup(t, newStore)
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		_, err := s.Put(canceled, "outputs", bytes.NewReader(Bytes(20<<20, 11)), blobstore.PutOptions{})
		require.ErrorIs(t, err, context.Canceled)
		_, err = s.Stat(ctx, keyOf("outputs", Bytes(20<<20, 11)))
		require.ErrorIs(t, err, blobstore.ErrNotFound)
	})
}

// described is obj as Get and Stat describe it: under a key of its own, the
// store does not know the digest (blobstore.Object).
func described(obj blobstore.Object) blobstore.Object {
	if _, digest, _ := blobstore.ParseKey(obj.Key); digest == "" {
		obj.Digest, obj.SHA256 = "", ""
	}
	return obj
}

// Index is a blobstore.Index in memory, for the stores' own tests (Cairn's is
// the catalog's, catalog.Store, tested against PostgreSQL there).
type Index struct {
	mu   sync.Mutex
	keys map[string]string // address → key
}

// NewIndex returns an empty Index.
func NewIndex() *Index { return &Index{keys: map[string]string{}} }

// BlobLookup implements blobstore.Index.
func (x *Index) BlobLookup(_ context.Context, address string) (string, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.keys[address], nil
}

// BlobRecord implements blobstore.Index.
func (x *Index) BlobRecord(_ context.Context, address, key string) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.keys[address] = key
	return nil
}

// claimLog records the keys a Put claims.
type claimLog struct {
	mu      sync.Mutex
	claimed []string
}

func (c *claimLog) claim(_ context.Context, key string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.claimed = append(c.claimed, key)
	return nil
}

func (c *claimLog) keys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.claimed)
}

// setup returns a context bounded by the test and a fresh store.
func setup(t *testing.T, newStore func(t *testing.T) blobstore.Store) (context.Context, blobstore.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx, newStore(t)
}

// get reads a whole object or range.
func get(ctx context.Context, t *testing.T, s blobstore.Store, key string, opts blobstore.GetOptions) ([]byte, blobstore.Object) {
	t.Helper()
	rc, obj, err := s.Get(ctx, key, opts)
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return b, obj
}

// Bytes returns n deterministic pseudo-random bytes for seed.
func Bytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	_, _ = newChaCha8(seed).Read(b)
	return b
}

func newChaCha8(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return rand.NewChaCha8(s)
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func keyOf(kind string, b []byte) string {
	key, err := blobstore.KeyFor(kind, digestOf(b))
	if err != nil {
		panic(err) // the suite only builds valid keys
	}
	return key
}

// onlyReader hides every method but Read (WriterTo, Seek, Len), as a network
// body would.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// failingReader fails every read.
type failingReader struct{}

func (failingReader) Read([]byte) (int, error) {
	return 0, errors.New("read from a reader that must not be read")
}

// LargeStream puts size bytes of deterministic pseudo-random content, of a
// length s cannot know in advance (with opts, but for their content type),
// reads them back and compares their sha256 while streaming. It samples the Go heap in use during the Put and during the
// Get and fails if either peak reaches maxHeap.
//
// HeapInuse is process-wide: call it from a test that does not call
// t.Parallel, so that no other test of the binary runs meanwhile.
func LargeStream(t *testing.T, s blobstore.Store, size int64, maxHeap uint64, opts blobstore.PutOptions) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	src := &streamReader{rng: newChaCha8(uint64(size)), left: size, h: sha256.New()}
	var obj blobstore.Object
	putPeak, putTime := sampleHeap(func() {
		var err error
		opts.ContentType = "application/x-test"
		obj, err = s.Put(ctx, "outputs", src, opts)
		require.NoError(t, err)
	})
	t.Cleanup(func() { _ = s.Delete(context.WithoutCancel(ctx), obj.Key) })
	want := "sha256:" + hex.EncodeToString(src.h.Sum(nil))
	require.Equal(t, int64(0), src.left, "the whole stream is read")
	require.Equal(t, want, obj.Digest)
	require.Equal(t, size, obj.Size)

	var got string
	getPeak, getTime := sampleHeap(func() {
		rc, gotObj, err := s.Get(ctx, obj.Key, blobstore.GetOptions{})
		require.NoError(t, err)
		defer rc.Close()
		require.Equal(t, described(obj), gotObj)
		h := sha256.New()
		n, err := io.Copy(h, onlyReader{rc})
		require.NoError(t, err)
		require.Equal(t, size, n)
		got = "sha256:" + hex.EncodeToString(h.Sum(nil))
	})
	require.Equal(t, want, got, "read back byte-identical")

	t.Logf("%d MiB: put %s, peak heap in use %.1f MiB; get %s, peak heap in use %.1f MiB",
		size>>20, putTime.Round(time.Millisecond), float64(putPeak)/(1<<20),
		getTime.Round(time.Millisecond), float64(getPeak)/(1<<20))
	require.Less(t, putPeak, maxHeap, "peak heap in use during Put")
	require.Less(t, getPeak, maxHeap, "peak heap in use during Get")
}

// sampleHeap runs f while sampling runtime.MemStats.HeapInuse every few
// milliseconds, and returns the peak and f's duration. It collects garbage
// first so that earlier tests' leftovers do not count.
func sampleHeap(f func()) (peak uint64, took time.Duration) {
	runtime.GC()
	var (
		mu   sync.Mutex
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mu.Lock()
		peak = max(peak, ms.HeapInuse)
		mu.Unlock()
	}
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				sample()
			}
		}
	})
	start := time.Now()
	func() {
		defer close(done)
		f()
	}()
	took = time.Since(start)
	wg.Wait()
	sample()
	mu.Lock()
	defer mu.Unlock()
	return peak, took
}

// streamReader yields left pseudo-random bytes and hashes them; it offers only
// Read, so the store cannot learn its length.
type streamReader struct {
	rng  *rand.ChaCha8
	left int64
	h    hash.Hash
}

func (r *streamReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	_, _ = r.rng.Read(p)
	r.h.Write(p)
	r.left -= int64(len(p))
	return len(p), nil
}
