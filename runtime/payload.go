package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/cairnrun/cairn/blobstore"
)

// payloadWriter receives a payload as a stream. Up to the inline limit it stays in
// memory; past it, everything (the buffered prefix first) streams into the blob store
// while being hashed, so memory stays flat for any size.
type payloadWriter struct {
	ctx         context.Context
	blobs       Blobs
	limit       int64
	contentType string
	// cat claims the object against the blob collector until the row naming
	// it commits (BlobClaim), and is the index that lets a large payload be
	// written once (blobstore.PutOptions.Index): the catalog.
	cat blobCatalog

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

// blobCatalog is what a payload's Put needs of the catalog (catalog.Store).
type blobCatalog interface {
	BlobClaim(ctx context.Context, key string) error
	// BlobIndex is the index of payloads written under keys of their own, nil
	// while they may not be (catalog.Store.BlobIndex).
	BlobIndex(ctx context.Context) blobstore.Index
}

func newPayloadWriter(ctx context.Context, blobs Blobs, limit int64, cat blobCatalog) *payloadWriter {
	return &payloadWriter{ctx: ctx, blobs: blobs, limit: limit, cat: cat}
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
		obj, err := w.blobs.Put(w.ctx, blobstore.KindPayloads, pr, blobstore.PutOptions{ContentType: ct, Size: -1, Claim: w.cat.BlobClaim, Index: w.cat.BlobIndex(w.ctx)})
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

// finish returns the payload's stored value: inline JSON when it is valid JSON within
// the limit ("null" when empty), else a $blob reference to the stored object.
func (w *payloadWriter) finish() (json.RawMessage, error) {
	if w.err != nil {
		w.abort(w.err)
		return nil, fmt.Errorf("store payload in the blob store: %w", w.err)
	}
	if w.spilled {
		w.pw.Close()
		res := <-w.done
		if res.err != nil {
			return nil, fmt.Errorf("store payload in the blob store: %w", res.err)
		}
		return blobstore.ObjectRef(res.obj).JSON(), nil
	}
	if len(bytes.TrimSpace(w.buf.Bytes())) == 0 {
		return json.RawMessage("null"), nil
	}
	// Within the limit: inline when it is JSON, else a blob (PutPayload's rule,
	// which also stores as bytes a value that mentions "$blob", so that a handler
	// cannot forge a reference to a blob it did not write).
	stored, err := blobstore.PutPayload(w.ctx, w.blobs, bytes.NewReader(w.buf.Bytes()), blobstore.PayloadOptions{
		InlineLimit: w.limit, ContentType: w.contentType, Claim: w.cat.BlobClaim, Index: w.cat.BlobIndex(w.ctx)})
	if err != nil {
		return nil, fmt.Errorf("store payload in the blob store: %w", err)
	}
	return stored, nil
}
