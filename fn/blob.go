package fn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
)

// Blob is the body of a {"$blob": …} reference: a value too large to travel
// inline (docs/functions.md, "The envelope"). Path is set for exec (a local,
// read-only file), URL for http and lambda (a presigned GET, when the blob
// store is S3).
type Blob struct {
	Digest      string `json:"digest"`
	Size        int64  `json:"size"`
	ContentType string `json:"content_type,omitempty"`
	Path        string `json:"path,omitempty"`
	URL         string `json:"url,omitempty"`
}

// ParseBlob reports whether raw is a $blob reference, and returns its body.
func ParseBlob(raw json.RawMessage) (*Blob, bool) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '{' || !bytes.Contains(t, []byte(`"$blob"`)) {
		return nil, false
	}
	var ref struct {
		Blob *Blob `json:"$blob"`
	}
	if json.Unmarshal(t, &ref) != nil || ref.Blob == nil {
		return nil, false
	}
	return ref.Blob, true
}

// Open opens a value of the envelope as a stream of bytes: a $blob reference
// is opened from its file (exec) or fetched from its URL (http, lambda),
// anything else is read as its JSON text. Close the reader.
func (c *Call) Open(ctx context.Context, raw json.RawMessage) (io.ReadCloser, error) {
	b, ok := ParseBlob(raw)
	if !ok {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}
	return b.Open(ctx)
}

// Open opens the blob's bytes: its file, or a GET of its URL. Errors name the
// blob by digest, never by its URL (a credential).
func (b *Blob) Open(ctx context.Context) (io.ReadCloser, error) {
	switch {
	case b.Path != "":
		f, err := os.Open(b.Path)
		if err != nil {
			return nil, fmt.Errorf("open $blob %s: %w", b.Digest, errors.Unwrap(err))
		}
		return f, nil
	case b.URL != "":
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.URL, nil)
		if err != nil {
			return nil, fmt.Errorf("open $blob %s: a malformed url", b.Digest)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("open $blob %s: GET its url: %w", b.Digest, redactErr(err))
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("open $blob %s: GET its url: %s", b.Digest, resp.Status)
		}
		return resp.Body, nil
	default:
		return nil, fmt.Errorf("open $blob %s: it has neither a path nor a url (an http or lambda function needs a blob store that presigns: S3)", b.Digest)
	}
}
