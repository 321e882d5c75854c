package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
)

// DefaultMaxCheckpointSize is Config.MaxCheckpointSize's default.
const DefaultMaxCheckpointSize = 256 << 20

// checkpointInput streams the body and reads the lease credential.
type checkpointInput struct {
	StepParams
	Authorization string `header:"Authorization" doc:"Bearer <lease_token from the envelope>"`
	ContentType   string `header:"Content-Type" doc:"application/json for an inline-able JSON checkpoint; anything else is stored as bytes"`
	streamedBody
}

// streamedBody is the body of an operation that streams it (checkpoints, signals,
// callbacks): unread until the handler knows the caller, then bounded by the
// server's limit.
type streamedBody struct {
	body          io.ReadCloser
	contentLength int64 // -1 when unknown (chunked)
	w             http.ResponseWriter
}

// Resolve implements huma.Resolver: it captures the body as a stream, unread.
func (b *streamedBody) Resolve(ctx huma.Context) []error {
	r, w := humago.Unwrap(ctx)
	b.body, b.contentLength, b.w = r.Body, r.ContentLength, w
	return nil
}

// CheckpointResult is the stored checkpoint.
type CheckpointResult struct {
	Checkpoint json.RawMessage `json:"checkpoint" doc:"the stored value: inline JSON or a $blob reference"`
}

func (s *Server) registerCheckpoint() {
	// Huma reads the whole body of an operation whose JSON media type has a schema
	// into memory before any Resolver runs, and closes it: Resolve would then find
	// nothing to stream (every PUT was a 400). Huma decides that at registration,
	// so the documented schema is set afterwards: the contract is unchanged and the
	// body stays a stream.
	jsonBody := &huma.MediaType{}
	register(s, huma.Operation{
		OperationID: "putCheckpoint",
		Method:      http.MethodPut,
		Path:        "/v1/runs/{id}/steps/{key}/checkpoint",
		Summary:     "Store a checkpoint from a running function",
		Description: "Authenticated by the attempt's lease credential (the envelope's lease_token) as bearer token, not by a role token. A checkpoint from a lease that is no longer current is refused with 409 before its body is read, and nothing is stored. A body over the server's limit (CAIRN_MAX_CHECKPOINT_SIZE, default 256 MiB) is refused with 413, unread when its Content-Length says so. The newest checkpoint is handed to the next attempt in its envelope.",
		Tags:        []string{"runs"},
		RequestBody: &huma.RequestBody{Content: map[string]*huma.MediaType{
			"application/json":         jsonBody,
			"application/octet-stream": {Schema: &huma.Schema{Type: "string", Format: "binary"}},
		}},
	}, RoleNone, []problemClass{classBadRequest, classUnauthorized, classLeaseLost, classPayloadTooLarge, classRequestTimeout}, func(ctx context.Context, in *checkpointInput) (*struct{ Body CheckpointResult }, error) {
		id, err := in.uuid()
		if err != nil {
			return nil, err
		}
		scheme, cred, _ := strings.Cut(in.Authorization, " ")
		if !strings.EqualFold(scheme, "Bearer") || cred == "" {
			return nil, withDetail(errUnauthorized, "the attempt's lease credential is required as bearer token")
		}
		token, err := functions.ParseLeaseCredential(s.cfg.SigningKey, id.String(), in.Key, strings.TrimSpace(cred))
		if err != nil {
			return nil, withDetail(err, "the lease credential is not valid for this step")
		}
		if in.contentLength > s.cfg.MaxCheckpointSize {
			return nil, checkpointTooLarge(s.cfg.MaxCheckpointSize)
		}
		lease := catalog.Lease{RunID: id, Key: in.Key, Token: token}
		// Nothing goes to the blob store for a lease that is not current: a lease
		// credential's signature never expires, so a stale one must not be a way to
		// write objects. The lease may still end between this check and the write
		// below; that write is fenced by the token, so such a checkpoint is refused
		// too, and only its blob (if it had one) stays behind as an orphan.
		if err := s.leaseCurrent(ctx, lease); err != nil {
			return nil, s.countLeaseLost(err)
		}
		body := http.MaxBytesReader(in.w, in.body, s.cfg.MaxCheckpointSize)
		stored, err := s.storeCheckpoint(ctx, body, in.ContentType)
		if err != nil {
			return nil, err
		}
		if err := s.store.StepCheckpoint(ctx, lease, stored, catalog.CheckpointEventData(stored)); err != nil {
			return nil, s.countLeaseLost(err)
		}
		return &struct{ Body CheckpointResult }{Body: CheckpointResult{Checkpoint: stored}}, nil
	})
	jsonBody.Schema = &huma.Schema{}
}

// leaseCurrent checks in the catalog that l is the step's current lease: the step is
// running under l's fencing token. A missing step or another token is
// catalog.ErrLeaseLost, as from a fenced write.
func (s *Server) leaseCurrent(ctx context.Context, l catalog.Lease) error {
	st, err := s.store.StepGet(ctx, l.RunID, l.Key)
	if errors.Is(err, catalog.ErrNotFound) {
		return catalog.ErrLeaseLost
	}
	if err != nil {
		return err
	}
	if st.Status != catalog.StepRunning || st.LeaseToken == nil || *st.LeaseToken != l.Token {
		return catalog.ErrLeaseLost
	}
	return nil
}

// countLeaseLost counts a checkpoint refused for its lease, and says so; other
// errors are returned as they are.
func (s *Server) countLeaseLost(err error) error {
	if !errors.Is(err, catalog.ErrLeaseLost) {
		return err
	}
	s.metrics.leaseLost("checkpoint_api")
	return withDetail(err, "the lease is no longer current: the checkpoint was not stored")
}

func checkpointTooLarge(limit int64) error {
	return withDetail(errTooLarge, "the checkpoint is larger than the limit of %d bytes", limit)
}

// storeCheckpoint stores a request body (a checkpoint, a signal's payload, a
// callback's output) as the runtime stores payloads (blobstore.PutPayload): a
// small JSON body inline, anything else streamed into the blob store. A JSON body
// within the inline limit must be JSON that PostgreSQL can store.
func (s *Server) storeCheckpoint(ctx context.Context, body io.Reader, contentType string) (json.RawMessage, error) {
	ct := contentType
	if ct == "" {
		ct = blobstore.DefaultContentType
	}
	stored, err := blobstore.PutPayload(ctx, s.blobs, readErrors{body}, blobstore.PayloadOptions{
		InlineLimit: s.cfg.InlineLimit,
		Bytes:       !strings.HasPrefix(strings.ToLower(contentType), "application/json"),
		Check:       checkJSONBody,
		ContentType: ct,
		Claim:       s.store.BlobClaim,
	})
	if re := (*readError)(nil); errors.As(err, &re) {
		return nil, bodyError(re.err)
	}
	return stored, err
}

// checkJSONBody refuses a JSON body that is not valid (400) or that PostgreSQL
// cannot store (422).
func checkJSONBody(b []byte) error {
	if !json.Valid(b) {
		return withDetail(errBadRequest, "the checkpoint is not valid JSON")
	}
	if at, msg := jsonTextProblem(b); msg != "" {
		return &validationError{errs: []error{&huma.ErrorDetail{Location: "body" + at, Message: msg}}}
	}
	return nil
}

// readErrors marks the errors of reading a request body (readError), so that a
// failed read is told from a failed write to the blob store.
type readErrors struct{ r io.Reader }

func (r readErrors) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = &readError{err}
	}
	return n, err
}

// readError is an error of reading a request body.
type readError struct{ err error }

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// bodyError is the error of a failed read of the request body: over the limit (a
// *http.MaxBytesError, a 413), too slow (errSlowBody, a 408), or broken.
func bodyError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) || errors.Is(err, errSlowBody) {
		return err
	}
	return withDetail(fmt.Errorf("%w: %w", errBadRequest, err), "could not read the request body")
}
