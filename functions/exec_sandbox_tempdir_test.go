package functions

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRemoveLeftoverAttempts: the attempt directories of a server that is gone
// (SIGKILLed mid-attempt) are removed, tmpfs and all, when the next server
// starts; those of a live server, and other files, stay.
func TestRemoveLeftoverAttempts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	gone := filepath.Join(dir, attemptDirPrefix+strconv.Itoa(dead.Process.Pid)+"-123")
	live := filepath.Join(dir, attemptDirPrefix+strconv.Itoa(os.Getpid())+"-456")
	other := filepath.Join(dir, "cairn-exec-notapid")
	for _, d := range []string{gone, live, other} {
		require.NoError(t, os.MkdirAll(filepath.Join(d, "home"), 0o700))
	}
	mounted := false
	if os.Geteuid() == 0 && mountTemp(gone, 1<<20) == nil {
		mounted = true
		t.Cleanup(func() { unmountTemp(gone) })
		require.NoError(t, os.MkdirAll(filepath.Join(gone, "tmp"), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(gone, "tmp", "f"), []byte("left behind"), 0o600))
	}

	n, err := RemoveLeftoverAttempts(dir)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = os.Stat(gone)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.DirExists(t, live)
	require.DirExists(t, other)
	if mounted {
		require.Empty(t, mountPointsUnder(dir), "the tmpfs was unmounted")
	}
}
