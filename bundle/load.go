package bundle

import (
	"context"
	"fmt"
	"io"
	"os"
)

// Bundle is a validated bundle: its files, its manifest as written, and the normalized
// definition, with the digest of the tree and the fingerprint of the definition.
type Bundle struct {
	// Tree lists the bundle's files and symlinks.
	Tree *Tree
	// Manifest is cairn.yaml as written.
	Manifest *Manifest
	// Definition is the normalized manifest.
	Definition *Definition
	// Digest is Tree.Digest(): "sha256:<hex>".
	Digest string
	// Fingerprint is Definition.Fingerprint(): "sha256:<hex>".
	Fingerprint string
}

// Load extracts a bundle archive from r into dir (see Extract), then parses, validates
// (with file checks against the tree) and normalizes its manifest. It is what the API
// runs on an upload; the canonical archive to store can then be written with
// WriteCanonical(ctx, dir, b.Tree, w).
//
// A manifest with more than lim.MaxSteps steps is rejected before the rest of its
// validation. Errors matching ErrInvalid (and ErrTooLarge) are the upload's fault; manifest errors
// are all reported, joined (see ValidationErrors). dir is the caller's, to remove.
// Load is safe for concurrent use with distinct dirs.
func Load(ctx context.Context, r io.Reader, dir string, lim Limits) (*Bundle, error) {
	t, err := Extract(ctx, r, dir, lim)
	if err != nil {
		return nil, err
	}
	return finish(dir, t, lim.withDefaults())
}

// finish reads, validates and normalizes the manifest of the bundle in dir.
func finish(dir string, t *Tree, lim Limits) (*Bundle, error) {
	data, err := readManifest(dir, lim)
	if err != nil {
		return nil, err
	}
	m, err := ParseManifest(data)
	if err != nil {
		return nil, err
	}
	if err := validateStepCount(m, lim); err != nil {
		return nil, err
	}
	if err := m.Validate(t); err != nil {
		return nil, err
	}
	def, err := m.Normalize()
	if err != nil {
		return nil, err
	}
	fp, err := def.Fingerprint()
	if err != nil {
		return nil, err
	}
	return &Bundle{Tree: t, Manifest: m, Definition: def, Digest: t.Digest(), Fingerprint: fp}, nil
}

// readManifest reads cairn.yaml from dir, at most lim.MaxManifestSize bytes.
func readManifest(dir string, lim Limits) ([]byte, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	defer root.Close()
	f, err := root.Open(ManifestPath)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, lim.MaxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	if int64(len(data)) > lim.MaxManifestSize {
		return nil, tooLarge(ManifestPath, "manifest is over the %s limit", formatSize(lim.MaxManifestSize))
	}
	return data, nil
}
