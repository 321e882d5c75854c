package blobstore

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
)

// DefaultInlineLimit is the inline limit servers use when none is configured
// (CAIRN_INLINE_LIMIT): the largest payload, in bytes, that a catalog row keeps
// inline. 256 KiB.
const DefaultInlineLimit = 256 << 10

// Putter is what PutPayload needs of a Store.
type Putter interface {
	Put(ctx context.Context, kind string, r io.Reader, opts PutOptions) (Object, error)
}

// PayloadOptions tune PutPayload.
type PayloadOptions struct {
	// InlineLimit is the largest value kept inline, in bytes. Required: the
	// servers' default is DefaultInlineLimit.
	InlineLimit int64
	// Bytes says that the value is not JSON, whatever its bytes say (a request
	// body of another media type): it is always stored as an object. Default false.
	Bytes bool
	// Check, when set, vets a value of at most InlineLimit bytes that is not
	// Bytes, before it is stored either way: its error is returned and nothing is
	// stored. Default nil.
	Check func(value []byte) error
	// ContentType is the object's media type when the value is stored as one.
	// Default application/json for valid JSON within InlineLimit that is not
	// Bytes, else application/octet-stream.
	ContentType string
	// Size is the length of the value when known, as PutOptions.Size; default
	// unknown.
	Size int64
	// Claim is PutOptions.Claim: writers pass the catalog's claim, since a
	// catalog row will name the object. Default nil.
	Claim func(ctx context.Context, key string) error
	// Index is PutOptions.Index: writers pass the catalog so that a large
	// payload is written once. Default nil.
	Index Index
}

// PutPayload stores a payload (an output, a checkpoint, a signal's or a
// callback's body) the one way Cairn stores payloads, and returns its stored
// form: the value itself, without surrounding white space, when it is valid JSON
// of at most InlineLimit bytes that does not mention "$blob" (MentionsRef); else a
// reference (Ref.JSON) to the object of kind KindPayloads that holds the value's
// bytes. A value that mentions "$blob" is stored as an object of its own, so that
// no stored value can read as a reference its writer did not store.
//
// r is read once, as a stream: at most InlineLimit+1 bytes are held in memory,
// and a larger value streams on into the store. Errors: Check's, an error reading
// r, or Put's.
func PutPayload(ctx context.Context, s Putter, r io.Reader, o PayloadOptions) (json.RawMessage, error) {
	head, err := io.ReadAll(io.LimitReader(r, o.InlineLimit+1))
	if err != nil {
		return nil, err
	}
	within := int64(len(head)) <= o.InlineLimit
	if within && !o.Bytes {
		if o.Check != nil {
			if err := o.Check(head); err != nil {
				return nil, err
			}
		}
		if v := bytes.TrimSpace(head); json.Valid(v) && !MentionsRef(v) {
			return json.RawMessage(v), nil
		}
	}
	ct := o.ContentType
	if ct == "" {
		ct = DefaultContentType
		if within && !o.Bytes && json.Valid(head) {
			ct = "application/json"
		}
	}
	size := int64(-1)
	switch {
	case within:
		size = int64(len(head))
	case o.Size > 0:
		size = o.Size
	}
	obj, err := s.Put(ctx, KindPayloads, io.MultiReader(bytes.NewReader(head), r), PutOptions{ContentType: ct, Size: size, Claim: o.Claim, Index: o.Index})
	if err != nil {
		return nil, err
	}
	return ObjectRef(obj).JSON(), nil
}
