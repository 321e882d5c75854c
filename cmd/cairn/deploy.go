package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/client"
)

// progressThreshold is the upload size from which a terminal shows a progress bar.
const progressThreshold = 4 << 20

func newDeployCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	c := newCLI(e, stdout, stderr)
	var noPromote bool
	cmd := &cobra.Command{
		Use:   "deploy PATH",
		Short: "Upload a bundle: a folder (packed here) or a .tar.gz archive (sent as is)",
		Long: `deploy uploads a bundle and registers the next version of its workflow.

A folder is validated and packed into the canonical archive while it is uploaded;
a file is sent as it is (the server validates it). Uploading the same files again
answers with the existing version ("unchanged").

The workflow's alias latest (what runs started without a version get) moves to
the version, also to the existing version of a bundle uploaded before: redeploying
an old bundle makes it latest again. --no-promote leaves latest where it is (cairn
promote moves it later).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.deploy(cmd.Context(), args[0], client.UploadOptions{NoPromote: noPromote})
		},
	}
	c.registerFlags(cmd)
	cmd.Flags().BoolVar(&noPromote, "no-promote", false, "do not move the alias latest to the deployed version")
	return cmd
}

func (c *cli) deploy(ctx context.Context, path string, opts client.UploadOptions) error {
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("deploy: %w", err)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	var res *client.UploadResult
	if info.IsDir() {
		res, err = c.deployDir(ctx, cl, path, opts)
	} else {
		res, err = c.deployFile(ctx, cl, path, info, opts)
	}
	if err != nil {
		return err
	}
	state := "created"
	if !res.Created {
		state = "unchanged"
	}
	latest := "moved to this version"
	if !res.Promoted {
		latest = "unchanged (--no-promote)"
	}
	fmt.Fprintf(c.stdout, "workflow: %s\nversion:  %d\ndigest:   %s\nstatus:   %s\nlatest:   %s\n", res.Workflow, res.Version, res.Digest, state, latest)
	return nil
}

// deployDir validates the folder here (so that a bad manifest is reported before
// anything is sent), then streams its canonical archive through a pipe: the archive
// is never held whole in memory or on disk.
func (c *cli) deployDir(ctx context.Context, cl *client.Client, dir string, opts client.UploadOptions) (*client.UploadResult, error) {
	// The server decides how many steps a workflow may have (CAIRN_MAX_STEPS): the
	// default is not imposed here.
	b, err := bundle.LoadDir(ctx, dir, bundle.Limits{MaxSteps: math.MaxInt})
	if err != nil {
		return nil, fmt.Errorf("deploy %s: %w", dir, err)
	}
	var size int64
	for _, e := range b.Tree.Entries {
		size += e.Size
	}
	pr, pw := io.Pipe()
	packed := make(chan error, 1)
	go func() {
		err := bundle.WriteCanonical(ctx, dir, b.Tree, pw)
		pw.CloseWithError(err)
		packed <- err
	}()
	// The compressed size is not known before the end: a bar without a total.
	body, done := c.progress(pr, -1, size)
	res, err := cl.UploadBundleWithOptions(ctx, body, opts)
	done()
	// Unblock the packer if the upload stopped early, and wait for it. A failure
	// to pack explains a failed upload better than the transport's error does.
	errUploadEnded := errors.New("upload ended")
	pr.CloseWithError(errUploadEnded)
	if packErr := <-packed; packErr != nil && !errors.Is(packErr, errUploadEnded) && !errors.Is(packErr, io.ErrClosedPipe) {
		return nil, fmt.Errorf("deploy %s: pack: %w", dir, packErr)
	}
	if err != nil {
		return nil, fmt.Errorf("deploy %s: %w", dir, err)
	}
	if res.Digest != b.Digest {
		return nil, fmt.Errorf("deploy %s: the server registered digest %s, the folder's is %s", dir, res.Digest, b.Digest)
	}
	return res, nil
}

// deployFile sends an archive as it is.
func (c *cli) deployFile(ctx context.Context, cl *client.Client, path string, info os.FileInfo, opts client.UploadOptions) (*client.UploadResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("deploy: %w", err)
	}
	defer f.Close()
	body, done := c.progress(f, info.Size(), info.Size())
	res, err := cl.UploadBundleWithOptions(ctx, body, opts)
	done()
	if err != nil {
		return nil, fmt.Errorf("deploy %s: %w", path, err)
	}
	return res, nil
}

// progress wraps an upload body with a progress bar on stderr when stderr is a
// terminal and the upload is large (estimate ≥ progressThreshold); total is the
// bar's length, or -1 when unknown. Call done when the upload ends.
func (c *cli) progress(r io.Reader, total, estimate int64) (io.Reader, func()) {
	if estimate < progressThreshold || !isTerminal(c.stderr) {
		return r, func() {}
	}
	bar := progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(c.stderr),
		progressbar.OptionSetDescription("uploading"),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSpinnerType(14),
	)
	pr := progressbar.NewReader(r, bar)
	return &pr, func() { _ = bar.Finish() }
}
