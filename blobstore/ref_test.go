package blobstore_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
)

const digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func TestRefRoundTrip(t *testing.T) {
	t.Parallel()
	r := blobstore.ObjectRef(blobstore.Object{Key: "payloads/sha256/x", Digest: digestA, Size: 5, ContentType: "text/plain"})
	raw := r.JSON()
	require.JSONEq(t, `{"$blob":{"digest":"`+digestA+`","size":5,"content_type":"text/plain"}}`, string(raw))
	got, ok := blobstore.ParseRef(raw)
	require.True(t, ok)
	require.Equal(t, r, got)
	key, err := got.Key()
	require.NoError(t, err)
	require.Equal(t, "payloads/sha256/"+digestA[len("sha256:"):], key)
	// A reference is written by Cairn: so is what it means to MentionsRef.
	require.True(t, blobstore.MentionsRef(raw))
}

// TestRefOfObjectUnderItsOwnName: a payload written once under a name of its
// own is referenced with its key; a reference written before keys were
// recorded (digest only) still names the content address, and a key that is
// not a payload's is refused.
func TestRefOfObjectUnderItsOwnName(t *testing.T) {
	t.Parallel()
	own := "payloads/u/" + digestA[len("sha256:"):]
	r := blobstore.ObjectRef(blobstore.Object{Key: own, Digest: digestA, Size: 5 << 30})
	raw := r.JSON()
	require.JSONEq(t, `{"$blob":{"digest":"`+digestA+`","size":5368709120,"key":"`+own+`"}}`, string(raw))
	got, ok := blobstore.ParseRef(raw)
	require.True(t, ok)
	key, err := got.Key()
	require.NoError(t, err)
	require.Equal(t, own, key)

	old, ok := blobstore.ParseRef(json.RawMessage(`{"$blob":{"digest":"` + digestA + `","size":5,"content_type":"text/plain"}}`))
	require.True(t, ok)
	key, err = old.Key()
	require.NoError(t, err)
	require.Equal(t, "payloads/sha256/"+digestA[len("sha256:"):], key)

	for _, bad := range []string{"bundles/u/" + digestA[len("sha256:"):], "logs/sha256/" + digestA[len("sha256:"):], "payloads/u/../x"} {
		_, err := blobstore.Ref{Digest: digestA, ObjectKey: bad}.Key()
		require.ErrorIs(t, err, blobstore.ErrInvalidKey, bad)
	}
}

func TestParseRefOnlyTakesReferences(t *testing.T) {
	t.Parallel()
	for _, v := range []string{``, `null`, `"$blob"`, `{"a":1}`, `[{"$blob":{"digest":"` + digestA + `"}}]`,
		`{"$blob":{}}`, `{"$blob":null}`, `{"$blob":{"digest":"` + digestA + `"},"other":1}`, `{"$blob":`} {
		_, ok := blobstore.ParseRef(json.RawMessage(v))
		require.False(t, ok, "%s", v)
	}
}

// TestMentionsRef: whatever the spelling, a value from outside that could read as
// a reference once PostgreSQL has stored it is caught.
func TestMentionsRef(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		v    string
		want bool
	}{
		{"plain object", `{"a":1,"b":[1,2,{"c":"$blob"}]}`, false},
		{"the word as a value", `{"note":"$blob is a key"}`, false},
		{"escapes in values only", `{"a":"\u0024blob","b":"\n"}`, false},
		{"scalar", `42`, false},
		{"string", `"\u0024blob"`, false},
		{"literal key", `{"$blob":{"digest":"` + digestA + `"}}`, true},
		{"escaped dollar", `{"\u0024blob":{"digest":"` + digestA + `"}}`, true},
		{"every letter escaped", `{"\u0024\u0062\u006c\u006f\u0062":{}}`, true},
		{"upper-case hex escape", `{"\u0024\u0062LOB":{}}`, false},
		{"key order", `{"z":1,"\u0024blob":{"digest":"` + digestA + `"}}`, true},
		{"duplicate keys, ref last", `{"$blob":1,"$blob":{"digest":"` + digestA + `"}}`, true},
		{"duplicate keys, ref first", `{"\u0024blob":{"digest":"` + digestA + `"},"$blob":1}`, true},
		{"nested in an object", `{"a":{"\u0024blob":{}}}`, true},
		{"nested in an array", `[1,[{"b":2},{"\u0024blob":{}}]]`, true},
		{"invalid JSON with an escape", `{"\u0024blob":`, true},
		{"two values", `{} {"\u0024blob":{}}`, true},
	} {
		require.Equal(t, tc.want, blobstore.MentionsRef([]byte(tc.v)), tc.name)
	}
}
