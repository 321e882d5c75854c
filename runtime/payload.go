package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/functions"
)

// blobRefJSON is the stored form of a large payload: {"$blob": {...}}.
func blobRefJSON(obj blobstore.Object) json.RawMessage {
	b, _ := json.Marshal(map[string]functions.BlobRef{"$blob": {
		Digest: obj.Digest, Size: obj.Size, ContentType: obj.ContentType,
	}})
	return b
}

// parseBlobRef reports whether v is a {"$blob": …} reference and returns it.
func parseBlobRef(v json.RawMessage) (functions.BlobRef, bool) {
	t := bytes.TrimSpace(v)
	if len(t) == 0 || t[0] != '{' || !bytes.Contains(t, []byte(`"$blob"`)) {
		return functions.BlobRef{}, false
	}
	var w struct {
		Blob *functions.BlobRef `json:"$blob"`
	}
	if err := json.Unmarshal(t, &w); err != nil || w.Blob == nil || w.Blob.Digest == "" {
		return functions.BlobRef{}, false
	}
	return *w.Blob, true
}

// payloadWriter receives a payload as a stream. Up to the inline limit it stays in
// memory; past it, everything (the buffered prefix first) streams into the blob store
// while being hashed, so memory stays flat for any size.
type payloadWriter struct {
	ctx         context.Context
	blobs       Blobs
	limit       int64
	contentType string

	buf     bytes.Buffer
	pw      *io.PipeWriter
	done    chan putResult
	size    int64
	err     error
	spilled bool
}

type putResult struct {
	obj blobstore.Object
	err error
}

func newPayloadWriter(ctx context.Context, blobs Blobs, limit int64) *payloadWriter {
	return &payloadWriter{ctx: ctx, blobs: blobs, limit: limit}
}

func (w *payloadWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.size += int64(len(p))
	if !w.spilled {
		if int64(w.buf.Len()+len(p)) <= w.limit {
			return w.buf.Write(p)
		}
		w.spill()
		if _, err := w.pw.Write(w.buf.Bytes()); err != nil {
			w.err = err
			return 0, err
		}
		w.buf = bytes.Buffer{}
	}
	n, err := w.pw.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}

func (w *payloadWriter) spill() {
	pr, pw := io.Pipe()
	w.pw, w.spilled = pw, true
	w.done = make(chan putResult, 1)
	ct := w.contentTypeOr("application/octet-stream")
	go func() {
		obj, err := w.blobs.Put(w.ctx, payloadKind, pr, blobstore.PutOptions{ContentType: ct, Size: -1})
		pr.CloseWithError(err) // unblock a writer if Put stopped early
		w.done <- putResult{obj, err}
	}()
}

func (w *payloadWriter) contentTypeOr(def string) string {
	if w.contentType != "" {
		return w.contentType
	}
	return def
}

// abort stops a spilled upload; the partial object never becomes visible.
func (w *payloadWriter) abort(cause error) {
	if w.spilled && w.pw != nil {
		w.pw.CloseWithError(cause)
		<-w.done
		w.pw = nil
	}
}

// errPayloadStore marks failures of the blob store while storing a payload: an
// infrastructure failure, retryable.
var errPayloadStore = errors.New("blob store")

// finish returns the payload's stored value: inline JSON when it is valid JSON within
// the limit ("null" when empty), else a $blob reference to the stored object.
func (w *payloadWriter) finish() (json.RawMessage, error) {
	if w.err != nil {
		w.abort(w.err)
		return nil, fmt.Errorf("%w: store payload: %w", errPayloadStore, w.err)
	}
	if w.spilled {
		w.pw.Close()
		res := <-w.done
		if res.err != nil {
			return nil, fmt.Errorf("%w: store payload: %w", errPayloadStore, res.err)
		}
		return blobRefJSON(res.obj), nil
	}
	data := bytes.TrimSpace(w.buf.Bytes())
	if len(data) == 0 {
		return json.RawMessage("null"), nil
	}
	if json.Valid(data) && !isBlobRefLike(data) {
		return json.RawMessage(bytes.Clone(data)), nil
	}
	ct := w.contentTypeOr("application/octet-stream")
	obj, err := w.blobs.Put(w.ctx, payloadKind, bytes.NewReader(w.buf.Bytes()), blobstore.PutOptions{ContentType: ct, Size: int64(w.buf.Len())})
	if err != nil {
		return nil, fmt.Errorf("%w: store payload: %w", errPayloadStore, err)
	}
	return blobRefJSON(obj), nil
}

// isBlobRefLike keeps a handler from forging a reference to someone else's blob: a
// JSON output that looks like {"$blob": …} is stored as bytes, not trusted.
func isBlobRefLike(data []byte) bool {
	_, ok := parseBlobRef(data)
	return ok
}
