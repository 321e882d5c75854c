package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// binTempDirPrefix names the folders of built cairn binaries; the pid after it
// lets a later run remove those of test binaries that are gone.
const binTempDirPrefix = "cairn-testbin-"

// cairnBuild is the binary of this test binary, built once: package state because
// there is nowhere else to keep it for the test binary's life.
var cairnBuild struct {
	mu   sync.Mutex
	done bool
	dir  string // the folder holding it, until RemoveCairnBinary
	path string
	err  error
}

// CairnBinary returns the path of a cairn binary built from this module's
// ./cmd/cairn, for tests that run the real binary as a subprocess (to signal it,
// kill it, measure it). The first call of a test binary builds it (go build,
// without -race: the tests measure the binary, not the detector), which takes a
// while; later calls return the same path. A failed build fails every caller's
// test with go build's output. It is safe for concurrent use.
//
// The binary's folder (mode 0755: a server may run it as another user) is named
// after the test binary's pid. RemoveCairnBinary, called from TestMain once the
// tests are over, removes it; what a test binary leaves behind (it was killed,
// or has no such TestMain) is removed by the first build of a later one, once
// that pid is gone.
func CairnBinary(t testing.TB) string {
	t.Helper()
	cairnBuild.mu.Lock()
	defer cairnBuild.mu.Unlock()
	if !cairnBuild.done {
		cairnBuild.done = true
		cairnBuild.dir, cairnBuild.path, cairnBuild.err = buildCairn()
	}
	if cairnBuild.err != nil {
		t.Fatalf("testenv: %v", cairnBuild.err)
	}
	return cairnBuild.path
}

// RemoveCairnBinary removes the binary CairnBinary built, if any; a later call of
// CairnBinary builds it again. Call it from TestMain after m.Run, when no test
// runs the binary any more:
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		testenv.RemoveCairnBinary()
//		os.Exit(code)
//	}
func RemoveCairnBinary() {
	cairnBuild.mu.Lock()
	defer cairnBuild.mu.Unlock()
	if cairnBuild.dir != "" {
		_ = os.RemoveAll(cairnBuild.dir) // best effort
	}
	cairnBuild.done, cairnBuild.dir, cairnBuild.path, cairnBuild.err = false, "", "", nil
}

// buildCairn builds ./cmd/cairn into a new folder and returns both. The package is
// named by its import path, which the go command resolves in the module of the
// working directory (a test runs in its package's folder).
func buildCairn() (dir, path string, err error) {
	binRemoveStale()
	dir, err = os.MkdirTemp("", binTempDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", "", fmt.Errorf("build cairn: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return "", "", fmt.Errorf("build cairn: %w", err)
	}
	path = filepath.Join(dir, "cairn")
	// Named, so that `cairn servers` tells it from a previous release's build
	// (PreviousCairnBinary: "devel") in a rolling upgrade's test.
	out, err := exec.Command("go", "build", "-ldflags=-X main.buildVersion="+TestBuildVersion, "-o", path, "github.com/cairnrun/cairn/cmd/cairn").CombinedOutput()
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", "", fmt.Errorf("go build ./cmd/cairn: %v\n%s", err, out)
	}
	return dir, path, nil
}

// TestBuildVersion is the version CairnBinary's build reports (cairn servers).
const TestBuildVersion = "test-build"

// binRemoveStale removes the folders of binaries built by test binaries that are
// gone.
func binRemoveStale() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), binTempDirPrefix+"*"))
	for _, dir := range matches {
		pidText, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(dir), binTempDirPrefix), "-")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || dbProcessAlive(pid) {
			continue
		}
		_ = os.RemoveAll(dir) // best effort
	}
}
