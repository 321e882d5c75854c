package migrations

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

// Rolling upgrades (docs/operations.md, "Upgrades"): every migration is in one of
// two phases. An expand migration only adds (tables, nullable columns, indexes
// built CONCURRENTLY, functions under new names, new definitions that old
// binaries can call as before): the binaries of the previous release run on the
// schema it leaves. A contract migration removes or changes what they use (a
// dropped column or function, a changed signature): it runs once no binary of
// the previous release is left. `cairn migrate up --phase expand` applies the
// pending migrations up to the first contract one, `--phase contract` the rest.
//
// Each migration declares its phase, the strongest lock it takes and whether it
// runs online (without blocking the servers' reads and writes for more than a
// moment) in header lines above `-- +goose Up`:
//
//	-- cairn-phase: expand
//	-- cairn-locks: ACCESS EXCLUSIVE on dispatchers (brief: a column without a default)
//	-- cairn-online: yes
//
// The migrations landed before the headers (up to LastUndeclared) are classified
// here, in Go: their files are never edited.

// Phase is a migration's phase.
type Phase string

const (
	// PhaseExpand adds only: the previous release's binaries run on it.
	PhaseExpand Phase = "expand"
	// PhaseContract removes or changes what the previous release uses.
	PhaseContract Phase = "contract"
)

// LastUndeclared is the last migration that landed before migrations declared
// their phase and locks.
const LastUndeclared = 50

// Info is what a migration declares about itself.
type Info struct {
	Version int64
	// Name is the file name (00055_primary_timelines.sql).
	Name  string
	Phase Phase
	// Locks is the strongest table lock it takes and on what ("none", "SHARE
	// on steps", …), as declared.
	Locks string
	// Online says it does not block the servers' reads and writes for more
	// than a moment.
	Online bool
	// Declared is false for a migration classified by default (LastUndeclared).
	Declared bool
}

// LockLevels are PostgreSQL's table lock levels, weakest first, and "none".
var LockLevels = []string{"none", "ACCESS SHARE", "ROW SHARE", "ROW EXCLUSIVE", "SHARE UPDATE EXCLUSIVE",
	"SHARE", "SHARE ROW EXCLUSIVE", "EXCLUSIVE", "ACCESS EXCLUSIVE"}

// LockLevel is the rank of the lock level locks starts with (an index of
// LockLevels), or -1 when it names none.
func LockLevel(locks string) int {
	best := -1
	for i, l := range LockLevels {
		if locks == l || strings.HasPrefix(locks, l+" ") {
			best = i // the longest match: SHARE ROW EXCLUSIVE over SHARE
		}
	}
	return best
}

// List returns every migration of FS with what it declares, in order.
func List() ([]Info, error) {
	names, err := fs.Glob(FS, "*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]Info, 0, len(names))
	for _, name := range names {
		text, err := fs.ReadFile(FS, name)
		if err != nil {
			return nil, err
		}
		info, err := Parse(name, text)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// Parse reads what the migration file name with text declares; a migration up
// to LastUndeclared without headers gets the default classification: expand,
// locks not declared, not online. A later one must declare its phase and locks.
func Parse(name string, text []byte) (Info, error) {
	num, _, ok := strings.Cut(name, "_")
	v, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil {
		return Info{}, fmt.Errorf("migration %s: no version number", name)
	}
	info := Info{Version: v, Name: name}
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "-- +goose Up") {
			break
		}
		key, value, found := strings.Cut(strings.TrimPrefix(line, "-- "), ":")
		if !found || !strings.HasPrefix(key, "cairn-") {
			continue
		}
		value = strings.TrimSpace(value)
		switch key {
		case "cairn-phase":
			info.Phase = Phase(value)
		case "cairn-locks":
			info.Locks = value
		case "cairn-online":
			info.Online = value == "yes"
		default:
			return info, fmt.Errorf("migration %s: unknown header %s", name, key)
		}
		info.Declared = true
	}
	if !info.Declared && v <= LastUndeclared {
		return Info{Version: v, Name: name, Phase: PhaseExpand, Locks: "not declared (landed before the phase headers)"}, nil
	}
	switch {
	case info.Phase != PhaseExpand && info.Phase != PhaseContract:
		return info, fmt.Errorf("migration %s: -- cairn-phase: %q, want expand or contract", name, info.Phase)
	case LockLevel(info.Locks) < 0:
		return info, fmt.Errorf("migration %s: -- cairn-locks: %q, want one of %s (then \"on TABLE\")", name, info.Locks, strings.Join(LockLevels, ", "))
	}
	return info, nil
}
