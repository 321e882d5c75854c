package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sync/singleflight"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
)

// fileCache keeps extracted bundles and downloaded blobs on local disk, by digest:
// content addressing makes every entry immutable, so an entry once renamed into
// place is valid forever. Concurrent requests for one digest share one download.
// Nothing is evicted yet.
type fileCache struct {
	dir   string
	blobs Blobs
	group singleflight.Group
}

func newFileCache(dir string, blobs Blobs) (*fileCache, error) {
	for _, sub := range []string{"bundles", "blobs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("cache dir: %w", err)
		}
	}
	return &fileCache{dir: dir, blobs: blobs}, nil
}

func digestHex(digest string) (string, error) {
	hex, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return "", fmt.Errorf("malformed digest %q", digest)
	}
	return hex, nil
}

// bundleDir returns the read-only extracted tree of a bundle.
func (c *fileCache) bundleDir(ctx context.Context, digest string) (string, error) {
	hex, err := digestHex(digest)
	if err != nil {
		return "", err
	}
	final := filepath.Join(c.dir, "bundles", hex)
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	_, err, _ = c.group.Do("bundle:"+hex, func() (any, error) {
		if _, err := os.Stat(final); err == nil {
			return nil, nil
		}
		key, err := blobstore.KeyFor(blobstore.KindBundles, digest)
		if err != nil {
			return nil, err
		}
		rc, _, err := c.blobs.Get(ctx, key, blobstore.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("fetch bundle %s: %w", digest, err)
		}
		defer rc.Close()
		tmp, err := os.MkdirTemp(filepath.Join(c.dir, "tmp"), "bundle-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		tree := filepath.Join(tmp, "tree")
		if _, err := bundle.Extract(ctx, rc, tree, bundle.DefaultLimits()); err != nil {
			return nil, fmt.Errorf("extract bundle %s: %w", digest, err)
		}
		// Everything read-only but the tree's root: moving a directory to another
		// parent rewrites its ".." entry, which needs write permission on the
		// directory itself, and a server that is not root has no other way to
		// get it. The root loses it once in place. (Sandboxed handlers see the
		// bundle through a read-only bind mount whatever the modes.)
		if err := makeReadOnly(tree); err != nil {
			return nil, err
		}
		if err := os.Rename(tree, final); err != nil && !errors.Is(err, fs.ErrExist) {
			if _, serr := os.Stat(final); serr != nil {
				return nil, fmt.Errorf("install bundle %s: %w", digest, err)
			}
		}
		if err := os.Chmod(final, 0o555); err != nil {
			return nil, fmt.Errorf("install bundle %s: %w", digest, err)
		}
		return nil, nil
	})
	if err != nil {
		return "", err
	}
	return final, nil
}

// makeReadOnly removes write permission from everything under root (not root
// itself), so that unsandboxed handlers of another uid cannot change the bundle
// that later attempts share.
func makeReadOnly(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.Chmod(p, info.Mode().Perm()&^0o222)
	})
}

// blobFile returns a local file holding the blob with digest.
func (c *fileCache) blobFile(ctx context.Context, digest string) (string, error) {
	hex, err := digestHex(digest)
	if err != nil {
		return "", err
	}
	final := filepath.Join(c.dir, "blobs", hex)
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	_, err, _ = c.group.Do("blob:"+hex, func() (any, error) {
		if _, err := os.Stat(final); err == nil {
			return nil, nil
		}
		key, err := blobstore.Ref{Digest: digest}.Key()
		if err != nil {
			return nil, err
		}
		rc, _, err := c.blobs.Get(ctx, key, blobstore.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("fetch blob %s: %w", digest, err)
		}
		defer rc.Close()
		f, err := os.CreateTemp(filepath.Join(c.dir, "tmp"), "blob-")
		if err != nil {
			return nil, err
		}
		defer os.Remove(f.Name())
		if _, err := io.Copy(f, rc); err != nil {
			f.Close()
			return nil, fmt.Errorf("download blob %s: %w", digest, err)
		}
		if err := f.Chmod(0o444); err != nil {
			f.Close()
			return nil, err
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
		return nil, os.Rename(f.Name(), final)
	})
	if err != nil {
		return "", err
	}
	return final, nil
}

// writable checks that bundles and blobs can be installed: a file can be created
// in the cache's tmp folder.
func (c *fileCache) writable() error {
	f, err := os.CreateTemp(filepath.Join(c.dir, "tmp"), "probe-")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}
