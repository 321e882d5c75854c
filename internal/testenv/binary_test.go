package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCairnBinary: one build per test binary, in a folder named after its pid that
// RemoveCairnBinary removes; a folder left by a test binary that is gone is
// removed by the next build.
func TestCairnBinary(t *testing.T) {
	t.Parallel()
	// A folder of a test binary that is gone (pid 2^22 + 1 is above Linux's
	// pid_max limit, so no process has it).
	stale, err := os.MkdirTemp("", binTempDirPrefix+strconv.Itoa(1<<22+1)+"-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(stale) })

	bin := CairnBinary(t)
	dir := filepath.Dir(bin)
	require.True(t, strings.HasPrefix(filepath.Base(dir), binTempDirPrefix+strconv.Itoa(os.Getpid())+"-"), dir)
	info, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o755), info.Mode().Perm())
	out, err := exec.Command(bin, "--help").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "Usage:")
	require.Equal(t, bin, CairnBinary(t), "built once")
	require.NoDirExists(t, stale)

	RemoveCairnBinary()
	require.NoDirExists(t, dir)
}
