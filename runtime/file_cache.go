package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sync/singleflight"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
)

// DefaultCacheMaxBytes is the default cap of a dispatcher's cache directory
// (Config.CacheMaxBytes): 10 GiB.
const DefaultCacheMaxBytes = 10 << 30

// fileCache keeps extracted bundles and downloaded blobs on local disk, by digest:
// content addressing makes every entry immutable, so an entry once renamed into
// place is valid until evicted. Concurrent requests for one digest share one
// download.
//
// The cache holds at most max bytes (negative: no cap) but for the entries in
// use: past it, the entries least recently used and not in use by an attempt
// (a cacheUse holds them) are removed, oldest use first. An entry in use is
// never removed, so the cache may exceed max while its attempts run. Entries
// left by an earlier process are found at start, ordered by modification time.
//
// Uses are counted in memory, so a cache directory must be one dispatcher's:
// one that another dispatcher holds (an flock on <dir>/.lock) is shared, and
// the cache then evicts nothing (shared reports it).
type fileCache struct {
	dir   string
	blobs Blobs
	group singleflight.Group
	max   int64
	// lock holds <dir>/.lock while the cache is open; nil when shared.
	lock *os.File
	// shared: another dispatcher holds the directory, so nothing is evicted.
	shared bool

	mu      sync.Mutex
	entries map[string]*cacheEntry // by "bundles/<hex>" or "blobs/<hex>"
	total   int64
	tick    uint64 // the clock of last uses
}

// cacheEntry is one installed bundle tree or blob file.
type cacheEntry struct {
	name string // "bundles/<hex>" or "blobs/<hex>"
	size int64
	used uint64 // fileCache.tick at the last use
	refs int    // attempts using it
}

// cacheUse is the entries one attempt uses; release gives them back.
type cacheUse struct {
	c     *fileCache
	mu    sync.Mutex
	names []string
}

func newFileCache(dir string, blobs Blobs, max int64) (*fileCache, error) {
	for _, sub := range []string{"bundles", "blobs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, fmt.Errorf("cache dir: %w", err)
		}
	}
	c := &fileCache{dir: dir, blobs: blobs, max: max, entries: map[string]*cacheEntry{}}
	lock, owned, err := lockCacheDir(filepath.Join(dir, ".lock"))
	if err != nil {
		return nil, fmt.Errorf("cache dir: lock: %w", err)
	}
	c.lock = lock
	if !owned {
		c.shared, c.max = true, -1
	} else if des, err := os.ReadDir(filepath.Join(dir, "tmp")); err == nil {
		// What a crashed process left mid-install or mid-eviction: nobody else
		// uses this directory.
		var left []string
		for _, de := range des {
			left = append(left, filepath.Join(dir, "tmp", de.Name()))
		}
		c.remove(left)
	}
	if err := c.load(); err != nil {
		return nil, fmt.Errorf("cache dir: %w", err)
	}
	c.mu.Lock()
	victims := c.evictLocked()
	c.mu.Unlock()
	c.remove(victims)
	return c, nil
}

// load registers the entries an earlier process left, oldest modification first.
func (c *fileCache) load() error {
	type found struct {
		name string
		size int64
		mod  int64
	}
	var all []found
	for _, sub := range []string{"bundles", "blobs"} {
		des, err := os.ReadDir(filepath.Join(c.dir, sub))
		if err != nil {
			return err
		}
		for _, de := range des {
			if _, err := digestHex("sha256:" + de.Name()); err != nil {
				continue
			}
			info, err := de.Info()
			if err != nil {
				continue
			}
			size := info.Size()
			if de.IsDir() {
				size = treeSize(filepath.Join(c.dir, sub, de.Name()))
			}
			all = append(all, found{sub + "/" + de.Name(), size, info.ModTime().UnixNano()})
		}
	}
	slices.SortFunc(all, func(a, b found) int { return cmp.Compare(a.mod, b.mod) })
	for _, f := range all {
		c.tick++
		c.entries[f.name] = &cacheEntry{name: f.name, size: f.size, used: c.tick}
		c.total += f.size
	}
	return nil
}

// treeSize is the bytes of the regular files under root.
func treeSize(root string) int64 {
	var n int64
	_ = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// newUse starts the uses of an attempt.
func (c *fileCache) newUse() *cacheUse { return &cacheUse{c: c} }

// release gives back every entry u holds, and evicts what the cap asks.
func (u *cacheUse) release() {
	u.mu.Lock()
	names := u.names
	u.names = nil
	u.mu.Unlock()
	if len(names) == 0 {
		return
	}
	c := u.c
	c.mu.Lock()
	for _, n := range names {
		if e := c.entries[n]; e != nil && e.refs > 0 {
			e.refs--
		}
	}
	victims := c.evictLocked()
	c.mu.Unlock()
	c.remove(victims)
}

// pin marks entry name used by u (nil: a use without holder) and reports
// whether it is installed.
func (c *fileCache) pin(name string, u *cacheUse) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[name]
	if e == nil {
		return false
	}
	c.tick++
	e.used = c.tick
	if u != nil {
		e.refs++
		u.mu.Lock()
		u.names = append(u.names, name)
		u.mu.Unlock()
	}
	return true
}

// installed registers a new entry (not in use) and evicts what the cap asks;
// the caller then pins it.
func (c *fileCache) installed(name string, size int64) {
	c.mu.Lock()
	if c.entries[name] == nil {
		c.tick++
		c.entries[name] = &cacheEntry{name: name, size: size, used: c.tick}
		c.total += size
	}
	c.mu.Unlock()
}

// evictLocked takes entries out of the cache, least recently used first and
// never one in use, until it holds at most max bytes; it moves them to tmp
// (so that a new install of the same digest does not meet them) and returns
// their new paths for remove. c.mu is held.
func (c *fileCache) evictLocked() []string {
	if c.max < 0 || c.total <= c.max {
		return nil
	}
	idle := make([]*cacheEntry, 0, len(c.entries))
	for _, e := range c.entries {
		if e.refs == 0 {
			idle = append(idle, e)
		}
	}
	slices.SortFunc(idle, func(a, b *cacheEntry) int { return cmp.Compare(a.used, b.used) })
	var victims []string
	for _, e := range idle {
		if c.total <= c.max {
			break
		}
		final := filepath.Join(c.dir, filepath.FromSlash(e.name))
		if strings.HasPrefix(e.name, "bundles/") {
			// Moving a directory to another parent rewrites its "..": the root
			// needs write permission back first.
			_ = os.Chmod(final, 0o755)
		}
		doomed, err := os.MkdirTemp(filepath.Join(c.dir, "tmp"), "evict-")
		if err != nil {
			break
		}
		if err := os.Rename(final, filepath.Join(doomed, "x")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			_ = os.Remove(doomed)
			continue
		}
		delete(c.entries, e.name)
		c.total -= e.size
		victims = append(victims, doomed)
	}
	return victims
}

// remove deletes evicted trees, giving their read-only folders write
// permission back first.
func (c *fileCache) remove(paths []string) {
	for _, p := range paths {
		_ = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(q, 0o755)
			}
			return nil
		})
		_ = os.RemoveAll(p)
	}
}

// close releases the directory for another dispatcher.
func (c *fileCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lock != nil {
		_ = c.lock.Close()
		c.lock = nil
	}
}

// usage returns the bytes the cache holds and how many entries.
func (c *fileCache) usage() (int64, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total, len(c.entries)
}

func digestHex(digest string) (string, error) {
	hex, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return "", fmt.Errorf("malformed digest %q", digest)
	}
	return hex, nil
}

// bundleDir returns the read-only extracted tree of a bundle, held by u until
// it is released.
func (c *fileCache) bundleDir(ctx context.Context, digest string, u *cacheUse) (string, error) {
	hex, err := digestHex(digest)
	if err != nil {
		return "", err
	}
	name := "bundles/" + hex
	final := filepath.Join(c.dir, "bundles", hex)
	// An eviction between the install and the pin is rare; try again then.
	for range 3 {
		if c.pin(name, u) {
			return final, nil
		}
		if err := c.installBundle(ctx, digest, hex, final); err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("install bundle %s: evicted at once (cache too small?)", digest)
}

func (c *fileCache) installBundle(ctx context.Context, digest, hex, final string) error {
	_, err, _ := c.group.Do("bundle:"+hex, func() (any, error) {
		if _, err := os.Stat(final); err == nil {
			c.installed("bundles/"+hex, treeSize(final))
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
		size := treeSize(tree)
		if err := os.Rename(tree, final); err != nil && !errors.Is(err, fs.ErrExist) {
			if _, serr := os.Stat(final); serr != nil {
				return nil, fmt.Errorf("install bundle %s: %w", digest, err)
			}
		}
		if err := os.Chmod(final, 0o555); err != nil {
			return nil, fmt.Errorf("install bundle %s: %w", digest, err)
		}
		c.installed("bundles/"+hex, size)
		return nil, nil
	})
	return err
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

// blobFile returns a local file holding the blob ref names, held by u until it
// is released. Files are named by the content's digest, whatever the key.
func (c *fileCache) blobFile(ctx context.Context, ref blobstore.Ref, u *cacheUse) (string, error) {
	digest := ref.Digest
	hex, err := digestHex(digest)
	if err != nil {
		return "", err
	}
	name := "blobs/" + hex
	final := filepath.Join(c.dir, "blobs", hex)
	for range 3 {
		if c.pin(name, u) {
			return final, nil
		}
		if err := c.installBlob(ctx, ref, hex, final); err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("download blob %s: evicted at once (cache too small?)", digest)
}

func (c *fileCache) installBlob(ctx context.Context, ref blobstore.Ref, hex, final string) error {
	digest := ref.Digest
	_, err, _ := c.group.Do("blob:"+hex, func() (any, error) {
		if info, err := os.Stat(final); err == nil {
			c.installed("blobs/"+hex, info.Size())
			return nil, nil
		}
		key, err := ref.Key()
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
		n, err := io.Copy(f, rc)
		if err != nil {
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
		if err := os.Rename(f.Name(), final); err != nil {
			return nil, err
		}
		c.installed("blobs/"+hex, n)
		return nil, nil
	})
	return err
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
