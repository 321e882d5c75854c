package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/client"
)

// withArgs adds command-line arguments to a command, for startDev.
func withArgs(args ...string) func(*exec.Cmd) {
	return func(cmd *exec.Cmd) { cmd.Args = append(cmd.Args, args...) }
}

// TestDevWatch runs `cairn dev --watch DIR` and edits the bundle folder as a user
// would, from inside the folder: a save redeploys and moves latest (the time it took is in the log), a
// save that does not validate prints its problem and leaves latest alone, and a
// file written in several bursts is deployed once, whole.
func TestDevWatch(t *testing.T) {
	t.Parallel()

	// The server runs in the bundle folder, as `cairn init` suggests: its data
	// (.cairn, which changes all the time) is inside the folder it watches.
	dir := newDevDir(t, os.Geteuid())
	manifest := filepath.Join(dir, "cairn.yaml")
	save := func(text string) time.Time {
		require.NoError(t, os.WriteFile(manifest, []byte(text), 0o644))
		return time.Now()
	}
	save("name: watched\ndescription: first\nsteps:\n  - {key: a, builtin: echo}\n")
	p, _ := startDev(t, dir, withArgs("--watch", "."))
	cl, err := client.New(p.creds["CAIRN_SERVER"], p.creds["CAIRN_TOKEN"])
	require.NoError(t, err)
	latest := func() int64 {
		resp, err := cl.GetWorkflowWithResponse(context.Background(), "watched")
		if err != nil || resp.JSON200 == nil {
			return 0
		}
		return resp.JSON200.LatestVersion
	}
	// Waiting for the deploy of the folder as it was when the server started.
	require.Eventually(t, func() bool { return latest() == 1 }, 60*time.Second, 20*time.Millisecond, "stdout:\n%s", p.stdout.String())

	// A save: version 2 becomes latest.
	saved := save("name: watched\ndescription: second\nsteps:\n  - {key: a, builtin: echo}\n")
	require.Eventually(t, func() bool { return latest() == 2 }, 30*time.Second, 10*time.Millisecond, "stdout:\n%s", p.stdout.String())
	t.Logf("redeployed %s after the save", time.Since(saved).Round(time.Millisecond))

	// A save that does not validate: its problem is printed, latest stays on 2.
	save("name: watched\nsteps:\n  - {key: a, needs: [nowhere], builtin: echo}\n")
	require.Eventually(t, func() bool { return strings.Contains(p.stdout.String(), `needs unknown step "nowhere"`) },
		30*time.Second, 10*time.Millisecond, "stdout:\n%s", p.stdout.String())
	require.Contains(t, p.stdout.String(), "not deployed (latest stays on the version deployed before)")
	require.EqualValues(t, 2, latest())

	// The fix, and a file written in bursts closer together than the watcher's
	// quiet time: one version, of the whole file. (The sleeps are the slow writer,
	// not a wait for the server.)
	save("name: watched\ndescription: third\nsteps:\n  - {key: a, builtin: echo}\n")
	f, err := os.Create(filepath.Join(dir, "data.txt"))
	require.NoError(t, err)
	for i := range 5 {
		_, err := f.WriteString(strings.Repeat(string(rune('a'+i)), 1000))
		require.NoError(t, err)
		time.Sleep(watchQuiet / 3)
	}
	require.NoError(t, f.Close())
	whole, err := bundle.LoadDir(context.Background(), dir, bundle.Limits{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return latest() == 3 }, 30*time.Second, 10*time.Millisecond, "stdout:\n%s", p.stdout.String())
	resp, err := cl.GetVersionWithResponse(context.Background(), "watched", 3)
	require.NoError(t, err)
	require.NotNil(t, resp.JSON200)
	require.Equal(t, whole.Digest, resp.JSON200.Digest, "version 3 is the folder with the whole file")
	// No version was made of the file half-written (nor of the broken save).
	versions, err := cl.ListVersionsWithResponse(context.Background(), "watched", nil)
	require.NoError(t, err)
	require.Len(t, *versions.JSON200.Items, 3, "stdout:\n%s", p.stdout.String())
}
