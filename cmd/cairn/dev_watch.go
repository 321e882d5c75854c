package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/client"
)

// watchQuiet is how long a watched bundle folder must see no change before it is
// validated and deployed: an editor's save (write, rename, chmod) or a build
// writing many files ends first.
const watchQuiet = 300 * time.Millisecond

// watchEvents is the buffer of file events of one watched folder: events that
// arrive while a bundle is validated show there, and the deploy waits for quiet.
const watchEvents = 4096

// bundleWatcher keeps a bundle folder deployed: on every change, once the folder
// has been quiet for watchQuiet, it validates the folder as a deploy would
// (validateBundle) and deploys it, which moves the workflow's latest. A folder
// that does not validate is not deployed: the problems are printed and latest
// stays where it was. A folder that changes while it is validated or uploaded is
// not deployed either: the next quiet moment is.
type bundleWatcher struct {
	dir    string
	cli    *cli
	client *client.Client
	out    io.Writer
	logger *slog.Logger
	// last is the digest deployed last, "" before the first deploy.
	last string
	// failed: the last save was not deployed (it did not validate, or the
	// server refused it).
	failed bool
}

// checkWatchDirs refuses a --watch folder that is not a bundle folder, before the
// server starts.
func checkWatchDirs(dirs []string) error {
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, bundle.ManifestPath)); err != nil {
			return fmt.Errorf("--watch %s: not a bundle folder (no %s): %w", dir, bundle.ManifestPath, err)
		}
	}
	return nil
}

// watchBundles runs a bundleWatcher per folder until ctx ends.
func watchBundles(ctx context.Context, c *cli, cl *client.Client, dirs []string, logger *slog.Logger) {
	for _, dir := range dirs {
		w := &bundleWatcher{dir: dir, cli: c, client: cl, out: c.stdout, logger: logger.With("component", "watch", "dir", dir)}
		go func() {
			if err := w.run(ctx); err != nil {
				logger.Error("watch stopped", "dir", dir, "error", err)
				fmt.Fprintf(c.stdout, "%s watch %s: stopped: %v\n", clock(), dir, err)
			}
		}()
	}
}

// run deploys the folder once, then after every change, until ctx ends.
func (w *bundleWatcher) run(ctx context.Context) error {
	fw, err := fsnotify.NewBufferedWatcher(watchEvents)
	if err != nil {
		return err
	}
	defer fw.Close()
	if err := w.addTree(fw, w.dir); err != nil {
		return err
	}
	fmt.Fprintf(w.out, "%s watch %s: deploying on every save\n", clock(), w.dir)
	changed := time.Now() // the first deploy: as if the folder had just changed
	quiet := time.NewTimer(0)
	for {
		select {
		case <-ctx.Done():
			quiet.Stop()
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return errors.New("file events closed")
			}
			if w.ignored(ev.Name) {
				continue
			}
			if ev.Has(fsnotify.Create) {
				if info, err := os.Lstat(ev.Name); err == nil && info.IsDir() {
					_ = w.addTree(fw, ev.Name) // a folder made (or moved) in: watch inside it too
				}
			}
			if changed.IsZero() {
				changed = time.Now()
			}
			quiet.Reset(watchQuiet)
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("file events closed")
			}
			// An overflow lost events: look again as if something changed.
			w.logger.Warn("file events", "error", err)
			if changed.IsZero() {
				changed = time.Now()
			}
			quiet.Reset(watchQuiet)
		case <-quiet.C:
			if changed.IsZero() {
				continue
			}
			if w.deploy(ctx, fw, changed) {
				changed = time.Time{}
			} else {
				quiet.Reset(watchQuiet) // the folder changed meanwhile: wait for quiet again
			}
		}
	}
}

// deploy validates and deploys the folder; it returns false when the folder
// changed meanwhile and nothing was deployed (the caller waits for quiet and
// tries again). changed is when the first change since the last deploy came.
func (w *bundleWatcher) deploy(ctx context.Context, fw *fsnotify.Watcher, changed time.Time) bool {
	// The server decides how many steps a workflow may have (CAIRN_MAX_STEPS).
	b, err := validateBundle(ctx, w.dir, bundle.Limits{MaxSteps: math.MaxInt})
	if len(fw.Events) > 0 {
		return false // saved again while it was read: that save is the one to deploy
	}
	if err != nil {
		if ctx.Err() != nil {
			return true
		}
		latest := "latest unchanged"
		if w.last != "" {
			latest = "latest stays on the version deployed before"
		}
		fmt.Fprintf(w.out, "%s watch %s: not deployed (%s):\n%v\n", clock(), w.dir, latest, err)
		w.failed = true
		return true
	}
	if b.Digest == w.last {
		if w.failed {
			fmt.Fprintf(w.out, "%s watch %s: valid again, the version deployed before (latest unchanged)\n", clock(), w.dir)
			w.failed = false
		}
		return true // saved without a change
	}
	res, err := w.cli.deployDir(ctx, w.client, w.dir, client.UploadOptions{})
	switch {
	case err != nil && len(fw.Events) > 0:
		return false // it changed while it was packed
	case err != nil && ctx.Err() == nil:
		fmt.Fprintf(w.out, "%s watch %s: not deployed (latest unchanged): %v\n", clock(), w.dir, err)
		w.failed = true
		return true
	case err != nil:
		return true
	case res.Digest != b.Digest:
		return false // changed between validation and upload: deploy the newer tree too
	}
	w.last, w.failed = res.Digest, false
	state := "deployed"
	if !res.Created {
		state = "deployed before"
	}
	fmt.Fprintf(w.out, "%s watch %s: workflow %s version %d %s, latest → %d (%s after the change)\n",
		clock(), w.dir, res.Workflow, res.Version, state, res.Version, time.Since(changed).Round(time.Millisecond))
	return true
}

// addTree watches dir and every folder below it, but those a bundle leaves out
// (.git, .cairn: bundle.Scan skips them).
func (w *bundleWatcher) addTree(fw *fsnotify.Watcher, dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != dir && errors.Is(err, fs.ErrNotExist) {
				return nil // gone meanwhile
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if p != dir && w.ignored(p) {
			return filepath.SkipDir
		}
		if err := fw.Add(p); err != nil {
			return fmt.Errorf("watch %s: %w", p, err)
		}
		return nil
	})
}

// ignored reports whether path is in a part of the folder a bundle leaves out:
// .git and .cairn (cairn dev's data, which changes all the time) at any depth.
func (w *bundleWatcher) ignored(path string) bool {
	rel, err := filepath.Rel(w.dir, path)
	if err != nil {
		return false
	}
	for dir := rel; dir != "." && dir != string(filepath.Separator) && dir != ""; dir = filepath.Dir(dir) {
		if base := filepath.Base(dir); base == ".git" || base == ".cairn" {
			return true
		}
	}
	return false
}

// clock is the time of day of a watch line.
func clock() string { return time.Now().Format("15:04:05.000") }
