package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
)

// UploadResult is the answer to a bundle upload.
type UploadResult struct {
	Workflow    string `json:"workflow"`
	Version     int    `json:"version"`
	Digest      string `json:"digest" doc:"sha256 of the canonical tree: the same files give the same digest"`
	Size        int64  `json:"size" doc:"size of the stored canonical archive in bytes"`
	Fingerprint string `json:"fingerprint" doc:"sha256 of the normalized definition"`
	Created     bool   `json:"created" doc:"false when this bundle was uploaded before (status 200)"`
}

type uploadOutput struct {
	Status   int
	Location string `header:"Location"`
	Body     UploadResult
}

// uploadInput takes the request body as a stream: Huma would otherwise buffer it.
type uploadInput struct {
	body io.ReadCloser
}

// Resolve implements huma.Resolver: it captures the body reader, bounded so that a
// body over the archive limit ends in a 413 without being read to its end.
func (u *uploadInput) Resolve(ctx huma.Context) []error {
	r, w := humago.Unwrap(ctx)
	u.body = http.MaxBytesReader(w, r.Body, maxArchiveSize()+1)
	return nil
}

func maxArchiveSize() int64 { return bundle.DefaultLimits().MaxArchiveSize }

func (s *Server) registerBundles() {
	register(s, huma.Operation{
		OperationID:   "uploadBundle",
		Method:        http.MethodPost,
		Path:          "/v1/bundles",
		Summary:       "Upload a bundle",
		Description:   "The body is a gzip-compressed tar archive with cairn.yaml at its root, streamed. The bundle is validated before anything is stored; its canonical archive is stored, then the next version of its workflow is registered. 201 for a new version, 200 with the existing version for a bundle uploaded before.",
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
		res, err := s.upload(ctx, in.body)
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
		return s.streamBlob(ctx, b.BlobKey)
	})
}

// upload validates a bundle from body, stores its canonical archive (unless stored
// before) and registers its version. Nothing is stored for an invalid bundle.
func (s *Server) upload(ctx context.Context, body io.Reader) (*UploadResult, error) {
	dir, err := os.MkdirTemp(s.cfg.TempDir, "cairn-upload-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	tree := dir + "/tree"
	b, err := bundle.Load(ctx, body, tree, s.cfg.BundleLimits)
	if err != nil {
		return nil, err // bundle.ErrInvalid, or a *http.MaxBytesError for an archive over the limit
	}
	def, err := b.Definition.CanonicalJSON()
	if err != nil {
		return nil, err
	}
	if v, err := s.store.VersionByDigest(ctx, b.Digest); err == nil {
		return &UploadResult{Workflow: v.Workflow, Version: v.Version, Digest: v.BundleDigest, Size: v.BundleSize, Fingerprint: v.Fingerprint}, nil
	} else if !errors.Is(err, catalog.ErrNotFound) {
		return nil, err
	}

	// Store the canonical archive, streamed through a pipe, under the tree digest.
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(bundle.WriteCanonical(ctx, tree, b.Tree, pw))
	}()
	obj, err := s.blobs.Put(ctx, "bundles", pr, blobstore.PutOptions{ContentType: "application/gzip", Digest: b.Digest, Size: -1})
	pr.CloseWithError(errors.New("upload ended"))
	if err != nil {
		return nil, err
	}
	steps := make([]catalog.NewStep, len(b.Definition.Steps))
	for i, st := range b.Definition.Steps {
		steps[i] = catalog.NewStep{Key: st.Key, Needs: st.Needs, MaxAttempts: st.Retry.MaxAttempts}
	}
	v, created, err := s.store.VersionRegister(ctx, &catalog.VersionRegisterParams{
		Workflow: b.Definition.Name, Description: b.Definition.Description, Digest: b.Digest,
		Size: obj.Size, BlobKey: obj.Key, Definition: def, Fingerprint: b.Fingerprint, Steps: steps,
	})
	if err != nil {
		return nil, err
	}
	return &UploadResult{Workflow: v.Workflow, Version: v.Version, Digest: v.BundleDigest, Size: v.BundleSize, Fingerprint: v.Fingerprint, Created: created}, nil
}
