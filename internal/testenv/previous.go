package testenv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// previousBuild is the previous release's binary, built once per test binary.
var previousBuild struct {
	once sync.Once
	path string
	err  error
}

// PreviousCairnBinary returns the path of the cairn binary of the previous
// release: the commit migrations/previous-release names, exported from this
// repository with git archive and built with go build. It is kept in the user's
// cache folder (cairn-test/cairn-COMMIT), so only the first run on a machine
// builds it. Without git or the commit (a shallow clone) the test fails.
func PreviousCairnBinary(t testing.TB) string {
	t.Helper()
	previousBuild.once.Do(func() { previousBuild.path, previousBuild.err = buildPrevious() })
	if previousBuild.err != nil {
		t.Fatalf("testenv: the previous release's binary: %v", previousBuild.err)
	}
	return previousBuild.path
}

func buildPrevious() (string, error) {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("find the module: %w", err)
	}
	dir := strings.TrimSpace(string(root))
	commit, err := previousCommit(filepath.Join(dir, "migrations", "previous-release"))
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "cairn-test", "cairn-"+commit)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	src, err := os.MkdirTemp("", "cairn-previous-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", dir, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s: %v\n%s (the clone needs that commit: fetch it, or deepen a shallow clone)", commit, err, out)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	tmp := bin + ".tmp" + fmt.Sprint(os.Getpid())
	build := exec.Command("go", "build", "-buildvcs=false", "-o", tmp, "./cmd/cairn")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", commit, err, out)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	return bin, os.Rename(tmp, bin)
}

// previousCommit reads the commit of the file (its first line that is not a
// comment).
func previousCommit(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			return line, nil
		}
	}
	return "", fmt.Errorf("%s names no commit", path)
}
