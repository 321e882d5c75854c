package pglocal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// EnvBinDir names the environment variable that points at the directory
// holding initdb and postgres. It is consulted after [Config.BinDir].
const EnvBinDir = "CAIRN_PG_BIN"

// ErrNoBinaries is returned (wrapped, with the places searched and what to
// install) by [Start] when no directory holding both initdb and postgres is
// found. Callers that can use another PostgreSQL test for it with errors.Is.
var ErrNoBinaries = errors.New("postgresql server binaries (initdb, postgres) not found")

// installHint tells a user without binaries what to do.
const installHint = "install the PostgreSQL server (Debian/Ubuntu: apt-get install postgresql; " +
	"macOS: brew install postgresql) or set " + EnvBinDir + " to the directory holding initdb and postgres"

// binaries is one directory of PostgreSQL server programs and their version.
type binaries struct {
	dir      string
	initdb   string
	postgres string
	version  string // e.g. "15.8"
	major    string // as written in PG_VERSION: "15", or "9.6" before 10
}

// versionPattern matches `postgres --version` output such as
// "postgres (PostgreSQL) 15.8 (Debian 15.8-0+deb12u1)" or "... 17beta1".
var versionPattern = regexp.MustCompile(`\(PostgreSQL\) (\d+)(?:\.(\d+))?`)

// findBinaries returns the first usable directory in this order: binDir (from
// Config), $CAIRN_PG_BIN, `pg_config --bindir`, the highest version under
// /usr/lib/postgresql/*/bin (Debian and Ubuntu), then each directory of PATH.
// An explicit binDir or $CAIRN_PG_BIN that lacks the programs is an error of
// its own rather than a reason to search further: the caller asked for it.
func findBinaries(ctx context.Context, binDir string, getenv func(string) string) (binaries, error) {
	if binDir != "" {
		b, err := probeBinaries(ctx, binDir)
		if err != nil {
			return binaries{}, fmt.Errorf("config BinDir %s: %w: %s", binDir, err, installHint)
		}
		return b, nil
	}
	if dir := getenv(EnvBinDir); dir != "" {
		b, err := probeBinaries(ctx, dir)
		if err != nil {
			return binaries{}, fmt.Errorf("%s=%s: %w: %s", EnvBinDir, dir, err, installHint)
		}
		return b, nil
	}

	var tried []string
	try := func(dir string) (binaries, bool) {
		tried = append(tried, dir)
		b, err := probeBinaries(ctx, dir)
		return b, err == nil
	}

	pathList := filepath.SplitList(getenv("PATH"))
	if pgConfig := lookPath("pg_config", pathList); pgConfig != "" {
		if dir, err := pgConfigBindir(ctx, pgConfig); err == nil {
			if b, ok := try(dir); ok {
				return b, nil
			}
		}
	}
	for _, dir := range debianBinDirs() {
		if b, ok := try(dir); ok {
			return b, nil
		}
	}
	for _, dir := range pathList {
		if dir == "" || !filepath.IsAbs(dir) {
			continue // a relative PATH entry would depend on the working directory
		}
		if b, ok := try(dir); ok {
			return b, nil
		}
	}
	return binaries{}, fmt.Errorf("%w (searched %s, pg_config --bindir, /usr/lib/postgresql/*/bin and PATH: %s): %s",
		ErrNoBinaries, EnvBinDir, strings.Join(dedupe(tried), ", "), installHint)
}

// probeBinaries checks that dir holds executable initdb and postgres programs
// and asks postgres for its version.
func probeBinaries(ctx context.Context, dir string) (binaries, error) {
	b := binaries{
		dir:      dir,
		initdb:   filepath.Join(dir, "initdb"),
		postgres: filepath.Join(dir, "postgres"),
	}
	for _, p := range []string{b.initdb, b.postgres} {
		if !isExecutable(p) {
			return binaries{}, fmt.Errorf("no executable %s: %w", p, ErrNoBinaries)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// postgres answers --version before its refuse-to-run-as-root check, so
	// this works for root too.
	out, err := exec.CommandContext(ctx, b.postgres, "--version").Output()
	if err != nil {
		return binaries{}, fmt.Errorf("run %s --version: %w", b.postgres, err)
	}
	m := versionPattern.FindSubmatch(out)
	if m == nil {
		return binaries{}, fmt.Errorf("parse %s --version output %q", b.postgres, bytes.TrimSpace(out))
	}
	b.version = string(m[1])
	b.major = string(m[1])
	if len(m[2]) > 0 {
		b.version += "." + string(m[2])
		if n, _ := strconv.Atoi(string(m[1])); n < 10 {
			b.major = b.version // 9.6 style: the major version has two parts
		}
	}
	return b, nil
}

// pgConfigBindir runs `pg_config --bindir`.
func pgConfigBindir(ctx context.Context, pgConfig string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, pgConfig, "--bindir").Output()
	if err != nil {
		return "", fmt.Errorf("run %s --bindir: %w", pgConfig, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// debianBinDirs lists /usr/lib/postgresql/<version>/bin, highest version first.
func debianBinDirs() []string {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) float64 {
		v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
		if err != nil {
			return -1
		}
		return v
	}
	sort.SliceStable(matches, func(i, j int) bool { return version(matches[i]) > version(matches[j]) })
	return matches
}

// lookPath finds an executable named name in the given PATH entries. It
// exists because exec.LookPath reads the process environment, while Config
// lets callers supply their own.
func lookPath(name string, pathList []string) string {
	for _, dir := range pathList {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		if p := filepath.Join(dir, name); isExecutable(p) {
			return p
		}
	}
	return ""
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

func dedupe(list []string) []string {
	seen := make(map[string]bool, len(list))
	out := list[:0:0]
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
