package blobstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// RefKey is the one key of a reference object: {"$blob": {…}}.
const RefKey = "$blob"

// Ref is the body of a {"$blob": …} reference: a payload (output or checkpoint)
// stored as an object of kind KindPayloads instead of inline. The catalog stores
// Digest, Size and ContentType, and ObjectKey when the object lives under a name
// of its own rather than its content address (a large payload written once, see
// PutOptions.Index); a handler's envelope adds Path (exec: a local file holding
// the bytes) or URL (http, lambda: a presigned GET). References written before
// ObjectKey existed have none and name the content address: both read through
// Key.
//
// Only Cairn writes references. A value a handler or a client sends that mentions
// the key "$blob" anywhere, however spelled (see MentionsRef), is never stored as
// it is: it is stored as bytes, and its reference is Cairn's. So a stored
// reference always names an object its writer stored.
type Ref struct {
	Digest      string `json:"digest"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type,omitempty"`
	ObjectKey   string `json:"key,omitempty"`
	Path        string `json:"path,omitempty"`
	URL         string `json:"url,omitempty"`
}

// ObjectRef is the reference to a stored payload object: ObjectKey is set only
// for an object under a name of its own.
func ObjectRef(obj Object) Ref {
	r := Ref{Digest: obj.Digest, Size: obj.Size, ContentType: obj.ContentType}
	if _, _, unique, err := SplitKey(obj.Key); err == nil && unique {
		r.ObjectKey = obj.Key
	}
	return r
}

// JSON returns the reference's wire and stored form, {"$blob": {…}}.
func (r Ref) JSON() json.RawMessage {
	b, err := json.Marshal(map[string]Ref{RefKey: r})
	if err != nil {
		// A struct of strings and an integer always marshals.
		panic(err)
	}
	return b
}

// Key returns the object key the reference names: ObjectKey when set, else the
// content address of Digest. ErrInvalidKey for a bad digest, or an ObjectKey
// that is not a payload's key.
func (r Ref) Key() (string, error) {
	if r.ObjectKey == "" {
		return KeyFor(KindPayloads, r.Digest)
	}
	if kind, _, err := ParseKey(r.ObjectKey); err != nil || kind != KindPayloads {
		return "", fmt.Errorf("%w: reference to %q", ErrInvalidKey, r.ObjectKey)
	}
	return r.ObjectKey, nil
}

// ParseRef reports whether a stored value is a reference, and returns it. Only
// values Cairn stored may be parsed this way: what a handler or client sends is
// checked with MentionsRef first.
func ParseRef(v json.RawMessage) (Ref, bool) {
	t := bytes.TrimSpace(v)
	if len(t) == 0 || t[0] != '{' || !bytes.Contains(t, []byte(`"`+RefKey+`"`)) {
		return Ref{}, false
	}
	var w map[string]*Ref
	if err := json.Unmarshal(t, &w); err != nil || len(w) != 1 || w[RefKey] == nil || w[RefKey].Digest == "" {
		return Ref{}, false
	}
	return *w[RefKey], true
}

// MentionsRef is the anti-forgery rule: it reports whether a JSON value from
// outside (a handler's output or checkpoint, a checkpoint PUT) has an object key
// that decodes to "$blob", at any depth and however spelled: escapes such as
// "\u0024blob", any key order, duplicate keys. PostgreSQL's jsonb decodes escapes
// and keeps the last of duplicate keys, so any such value could read as a
// reference once stored. Such values must be stored as bytes (a blob of their
// own), never inline. Invalid JSON also reports true: it is never stored inline.
// Callers pass values up to the inline limit: the value is decoded whole.
func MentionsRef(v []byte) bool {
	// Fast path: without the key's bytes and without any escape, no key can
	// decode to it.
	if !bytes.Contains(v, []byte(RefKey)) && !bytes.Contains(v, []byte(`\`)) {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return true
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return true // more than one value
	}
	return hasRefKey(x)
}

func hasRefKey(x any) bool {
	switch x := x.(type) {
	case map[string]any:
		for k, v := range x {
			if k == RefKey || hasRefKey(v) {
				return true
			}
		}
	case []any:
		for _, v := range x {
			if hasRefKey(v) {
				return true
			}
		}
	}
	return false
}
