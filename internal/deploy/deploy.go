package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/namespace"
)

// Blobs is the blob store method Register calls; every blobstore.Store has it.
type Blobs interface {
	Put(ctx context.Context, kind string, r io.Reader, opts blobstore.PutOptions) (blobstore.Object, error)
}

// Config tunes Register. The zero value (and a nil *Config) means the defaults.
type Config struct {
	// TempDir is where the archive is extracted while it is validated and copied
	// into the blob store; default os.TempDir(). Register removes what it made
	// there before it returns.
	TempDir string
	// Limits bound the bundle (entries, sizes, steps per workflow); a zero field
	// takes its default (bundle.DefaultLimits).
	Limits bundle.Limits
	// NoPromote leaves the workflow's alias latest where it is; by default (false)
	// Register moves latest to the version it registers or finds.
	NoPromote bool
	// Actor is who deploys (the token's name), recorded with the move of latest;
	// default "".
	Actor string
	// Namespace is the namespace deployed in (package namespace): the workflow and
	// every name its definition uses are keyed in it (bundle.Definition.Qualify);
	// default namespace.Default.
	Namespace string
}

// Register deploys the bundle archive (a gzip-compressed tar) read from body: it
// extracts and validates the bundle, stores its canonical archive under its tree
// digest (unless stored before), and registers the next version of its workflow with
// the step layout its runs start with. Nothing is stored for an invalid bundle.
//
// Unless cfg.NoPromote, the alias latest moves to the version in the transaction
// that registers it. A bundle deployed before (the same digest) returns its existing
// version and created=false, without storing anything again; latest moves back to
// that version all the same (redeploying an old bundle makes it latest again).
// Concurrent calls are safe, with
// the same bundle too: catalog.Store.VersionRegister gives consecutive versions and
// one version per digest.
//
// Errors: those of bundle.Load for the body (matching bundle.ErrInvalid, and
// bundle.ErrTooLarge for a limit; a reader's error, such as *http.MaxBytesError,
// as it is), of blobs.Put, and of the catalog (catalog.ErrUnavailable, …).
func Register(ctx context.Context, store *catalog.Store, blobs Blobs, body io.Reader, cfg *Config) (v *catalog.Version, created bool, err error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	dir, err := os.MkdirTemp(c.TempDir, "cairn-upload-")
	if err != nil {
		return nil, false, fmt.Errorf("deploy: %w", err)
	}
	defer os.RemoveAll(dir)
	tree := filepath.Join(dir, "tree")
	b, err := bundle.Load(ctx, body, tree, c.Limits)
	if err != nil {
		return nil, false, fmt.Errorf("load bundle: %w", err)
	}
	b.Definition.Qualify(c.Namespace)
	if err := checkChildren(ctx, store, b, c.Namespace); err != nil {
		return nil, false, fmt.Errorf("load bundle: %w", err)
	}
	def, err := b.Definition.CanonicalJSON()
	if err != nil {
		return nil, false, fmt.Errorf("bundle %s: %w", b.Digest, err)
	}
	if v, err := store.VersionByDigest(ctx, b.Digest, b.Definition.Name); err == nil {
		if !c.NoPromote {
			if _, err := store.AliasSet(ctx, &catalog.AliasSetParams{Workflow: v.Workflow, Alias: catalog.AliasLatest,
				Version: v.Version, Kind: catalog.AliasDeploy, Actor: c.Actor}); err != nil {
				return nil, false, err
			}
		}
		return v, false, nil
	} else if !errors.Is(err, catalog.ErrNotFound) {
		return nil, false, err
	}
	obj, err := storeCanonical(ctx, store, blobs, tree, b)
	if err != nil {
		return nil, false, err
	}
	return store.VersionRegister(ctx, &catalog.VersionRegisterParams{
		Workflow: b.Definition.Name, Description: b.Definition.Description, Digest: b.Digest,
		Size: obj.Size, BlobKey: obj.Key, Definition: def, Fingerprint: b.Fingerprint, Steps: stepLayout(b.Definition),
		OnFailure: onFailureLayout(b.Definition),
		NoPromote: c.NoPromote, Actor: c.Actor,
	})
}

// checkChildren refuses a workflow step pinned to a version number that does not
// exist (a *bundle.ValidationError naming the step and field, matching
// bundle.ErrInvalid). A step of a workflow that runs the workflow itself may name
// the version being deployed, or any earlier one. Aliases are resolved when the
// child starts, not here: they move.
func checkChildren(ctx context.Context, store *catalog.Store, b *bundle.Bundle, ns string) error {
	var errs []error
	for _, cw := range b.Manifest.ChildWorkflows() {
		name := namespace.Qualify(ns, cw.Name)
		_, err := store.VersionGet(ctx, name, cw.Version)
		switch {
		case err == nil:
			continue
		case !errors.Is(err, catalog.ErrNotFound):
			return err
		}
		if name == b.Definition.Name {
			w, err := store.WorkflowGet(ctx, name)
			switch {
			case err == nil && cw.Version <= w.LatestVersion+1, errors.Is(err, catalog.ErrNotFound) && cw.Version == 1:
				continue // the version being deployed
			case err != nil && !errors.Is(err, catalog.ErrNotFound):
				return err
			}
		}
		errs = append(errs, &bundle.ValidationError{Path: bundle.ManifestPath, Step: cw.Step, Field: cw.Field,
			Message: fmt.Sprintf("runs workflow %s version %d, which does not exist", cw.Name, cw.Version)})
	}
	return errors.Join(errs...)
}

// storeCanonical streams the canonical archive of the bundle extracted in dir into
// blobs, through a pipe, under the tree digest.
func storeCanonical(ctx context.Context, store *catalog.Store, blobs Blobs, dir string, b *bundle.Bundle) (blobstore.Object, error) {
	pr, pw := io.Pipe()
	written := make(chan struct{})
	go func() {
		defer close(written)
		pw.CloseWithError(bundle.WriteCanonical(ctx, dir, b.Tree, pw))
	}()
	obj, err := blobs.Put(ctx, blobstore.KindBundles, pr, blobstore.PutOptions{ContentType: "application/gzip", Digest: b.Digest, Size: -1,
		// The version row naming it commits after the Put: the claim keeps the blob
		// collector from deleting an archive stored before (and no longer named).
		Claim: store.BlobClaim})
	// Put may return before reading to the end (an error, or an archive stored
	// before): closing the reader ends the writer, which is waited for so that
	// nothing reads dir once Register has removed it.
	pr.CloseWithError(errors.New("upload ended"))
	<-written
	if err != nil {
		return blobstore.Object{}, fmt.Errorf("store bundle %s: %w", b.Digest, err)
	}
	return obj, nil
}

// stepLayout is what a run of def starts with: each step's key, needs, attempts and
// what to do when they are used up.
func stepLayout(def *bundle.Definition) []catalog.NewStep {
	steps := make([]catalog.NewStep, len(def.Steps))
	for i, st := range def.Steps {
		steps[i] = catalog.NewStep{Key: st.Key, Needs: st.Needs, MaxAttempts: st.Retry.MaxAttempts,
			OnExhausted: catalog.OnExhausted(st.Retry.OnExhausted), After: catalog.TriggerRule(st.Rule()),
			When: st.When != ""}
		if st.Compensate != nil {
			steps[i].CompensateAttempts = st.Compensate.Retry.MaxAttempts
		}
	}
	return steps
}

// onFailureLayout is what a failed run of def runs once, after its compensations.
func onFailureLayout(def *bundle.Definition) []catalog.NewStep {
	steps := make([]catalog.NewStep, len(def.OnFailure))
	for i, st := range def.OnFailure {
		steps[i] = catalog.NewStep{Key: st.Key, MaxAttempts: st.Retry.MaxAttempts}
	}
	return steps
}
