package api

import (
	"context"
	"io"
	"net/http"
	"strconv"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/cairnrun/cairn/internal/deploy"
	"github.com/cairnrun/cairn/namespace"
)

// UploadResult is the answer to a bundle upload.
type UploadResult struct {
	Workflow    string `json:"workflow"`
	Version     int    `json:"version"`
	Digest      string `json:"digest" doc:"sha256 of the canonical tree: the same files give the same digest"`
	Size        int64  `json:"size" doc:"size of the stored canonical archive in bytes"`
	Fingerprint string `json:"fingerprint" doc:"sha256 of the normalized definition"`
	Created     bool   `json:"created" doc:"false when this bundle was uploaded before (status 200)"`
	Promoted    bool   `json:"promoted" doc:"true when the alias latest names this version now (the default), false with ?promote=false"`
}

type uploadOutput struct {
	Status   int
	Location string `header:"Location"`
	Body     UploadResult
}

// uploadInput takes the request body as a stream: Huma would otherwise buffer it.
type uploadInput struct {
	Promote bool `query:"promote" default:"true" doc:"when true (the default), the alias latest moves to the version (also to the existing version of a bundle uploaded before); false leaves latest where it is"`
	body    io.ReadCloser
	// contentLength is the body's announced size; -1 when unknown (chunked).
	contentLength int64
}

// Resolve implements huma.Resolver: it captures the body reader. Extract stops
// reading it at the archive limit.
func (u *uploadInput) Resolve(ctx huma.Context) []error {
	r, _ := humago.Unwrap(ctx)
	u.body, u.contentLength = r.Body, r.ContentLength
	return nil
}

func (s *Server) registerBundles() {
	register(s, huma.Operation{
		OperationID:   "uploadBundle",
		Method:        http.MethodPost,
		Path:          "/v1/bundles",
		Summary:       "Upload a bundle",
		Description:   "The body is a gzip-compressed tar archive with cairn.yaml at its root, streamed. The bundle is validated before anything is stored; its canonical archive is stored, then the next version of its workflow is registered and (unless ?promote=false) the alias latest moved to it, in one transaction. 201 for a new version, 200 with the existing version for a bundle uploaded before.",
		Tags:          []string{"bundles"},
		DefaultStatus: http.StatusCreated,
		Responses: map[string]*huma.Response{
			"200": {Description: "The bundle was uploaded before: its existing version", Content: map[string]*huma.MediaType{
				"application/json": {Schema: &huma.Schema{Ref: "#/components/schemas/UploadResult"}},
			}},
		},
		RequestBody: &huma.RequestBody{
			Required: true,
			Content: map[string]*huma.MediaType{
				"application/gzip": {Schema: &huma.Schema{Type: "string", Format: "binary"}},
			},
		},
	}, RoleOperator, []problemClass{classInvalidBundle, classPayloadTooLarge, classRequestTimeout}, func(ctx context.Context, in *uploadInput) (*uploadOutput, error) {
		// An archive announced over the limit is refused before a byte of it is
		// read: a client that waits for "100 Continue" sends nothing.
		if err := s.cfg.BundleLimits.CheckArchiveSize(in.contentLength); err != nil {
			return nil, err
		}
		res, err := s.upload(ctx, in.body, !in.Promote)
		if err != nil {
			return nil, err
		}
		status := http.StatusOK
		if res.Created {
			status = http.StatusCreated
		}
		return &uploadOutput{Status: status, Location: "/v1/workflows/" + res.Workflow + "/versions/" + strconv.Itoa(res.Version), Body: *res}, nil
	})

	register(s, huma.Operation{
		OperationID: "getBundle",
		Method:      http.MethodGet,
		Path:        "/v1/bundles/{digest}",
		Summary:     "Download a bundle",
		Description: "The canonical archive (gzip-compressed tar) of an uploaded bundle. Operators only: its manifest holds the http steps' headers, which viewers never see.",
		Tags:        []string{"bundles"},
		Responses: map[string]*huma.Response{"200": {Description: "The canonical archive", Content: map[string]*huma.MediaType{
			"application/gzip": {Schema: &huma.Schema{Type: "string", Format: "binary"}},
		}}},
	}, RoleOperator, []problemClass{classNotFound}, func(ctx context.Context, in *struct {
		Digest string `path:"digest" pattern:"^sha256:[0-9a-f]{64}$" doc:"bundle digest"`
	}) (*huma.StreamResponse, error) {
		b, err := s.store.BundleGet(ctx, in.Digest)
		if err != nil {
			return nil, err
		}
		return s.streamBlob(ctx, b.BlobKey, "")
	})
}

// upload deploys the bundle read from body (package deploy); nothing is stored for
// an invalid bundle.
func (s *Server) upload(ctx context.Context, body io.Reader, noPromote bool) (*UploadResult, error) {
	v, created, err := deploy.Register(ctx, s.store, s.blobs, body, &deploy.Config{TempDir: s.cfg.TempDir, Limits: s.cfg.BundleLimits,
		NoPromote: noPromote, Actor: actor(ctx), Namespace: requestNamespace(ctx)})
	if err != nil {
		return nil, err // bundle.ErrInvalid (and bundle.ErrTooLarge for an archive over a limit)
	}
	return &UploadResult{Workflow: namespace.Strip(v.Workflow), Version: v.Version, Digest: v.BundleDigest, Size: v.BundleSize, Fingerprint: v.Fingerprint, Created: created, Promoted: !noPromote}, nil
}
