// Command gen writes the next migration from catalog/sql, the current definition of
// every cairn_* function and trigger:
//
//	go run ./migrations/gen [-base REV] NAME
//
// Edit catalog/sql, then run it from the repository: it compares catalog/sql as it
// is in the work tree with catalog/sql at REV (default HEAD) and writes
// migrations/NNNNN_NAME.sql, numbered after the last migration, whose Up holds the
// definitions that changed, are new, or are dropped, and whose Down puts back REV's.
// The file is marked generated; review reads the diff of catalog/sql. Add its line
// to migrations/landed.sha256 when it lands.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing/fstest"

	"github.com/cairnrun/cairn/migrations/snapshot"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

var migrationName = regexp.MustCompile(`^[a-z0-9][a-z0-9_]*$`)

func run(args []string, stdout io.Writer) error {
	flags := flag.NewFlagSet("gen", flag.ContinueOnError)
	base := flags.String("base", "HEAD", "the git revision whose catalog/sql the migrations reach")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() != 1 || !migrationName.MatchString(flags.Arg(0)) {
		return errors.New("usage: go run ./migrations/gen [-base REV] NAME (NAME in lower case, digits and _)")
	}
	name := flags.Arg(0)
	rootOut, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return fmt.Errorf("find the repository: %w", err)
	}
	root := strings.TrimSpace(string(rootOut))

	prevFS, err := gitSnapshot(root, *base)
	if err != nil {
		return err
	}
	prev, err := snapshot.Read(prevFS)
	if err != nil {
		return fmt.Errorf("catalog/sql at %s: %w", *base, err)
	}
	next, err := snapshot.Read(os.DirFS(filepath.Join(root, "catalog", "sql")))
	if err != nil {
		return fmt.Errorf("catalog/sql: %w", err)
	}
	text, changed := snapshot.Migration(prev, next, "`go run ./migrations/gen "+name+"`")
	if len(changed) == 0 {
		return fmt.Errorf("catalog/sql defines nothing new or changed since %s: edit it first", *base)
	}

	number, err := nextNumber(filepath.Join(root, "migrations"))
	if err != nil {
		return err
	}
	file := fmt.Sprintf("%05d_%s.sql", number, name)
	path := filepath.Join(root, "migrations", file)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote migrations/%s:\n", file)
	for _, c := range changed {
		fmt.Fprintf(stdout, "  %s\n", c)
	}
	fmt.Fprintf(stdout, "when it lands: (cd migrations && sha256sum %s >> landed.sha256)\n", file)
	return nil
}

// gitSnapshot reads catalog/sql/*.sql as they are at rev.
func gitSnapshot(root, rev string) (fstest.MapFS, error) {
	out, err := exec.Command("git", "-C", root, "ls-tree", "--name-only", rev, "catalog/sql/").Output()
	if err != nil {
		return nil, fmt.Errorf("list catalog/sql at %s: %w", rev, err)
	}
	files := fstest.MapFS{}
	for _, path := range strings.Fields(string(out)) {
		if !strings.HasSuffix(path, ".sql") {
			continue
		}
		b, err := exec.Command("git", "-C", root, "show", rev+":"+path).Output()
		if err != nil {
			return nil, fmt.Errorf("read %s at %s: %w", path, rev, err)
		}
		files[filepath.Base(path)] = &fstest.MapFile{Data: b}
	}
	return files, nil
}

// nextNumber is one more than the highest NNNNN of dir's NNNNN_name.sql files.
func nextNumber(dir string) (int, error) {
	names, err := filepath.Glob(filepath.Join(dir, "[0-9]*_*.sql"))
	if err != nil {
		return 0, err
	}
	sort.Strings(names)
	last := 0
	for _, n := range names {
		digits, _, _ := strings.Cut(filepath.Base(n), "_")
		v, err := strconv.Atoi(digits)
		if err != nil {
			return 0, fmt.Errorf("migration %s: %w", n, err)
		}
		last = max(last, v)
	}
	if last == 0 {
		return 0, fmt.Errorf("no migrations in %s", dir)
	}
	return last + 1, nil
}
