package migrations

import (
	"fmt"
	"regexp"
	"strings"
)

// LargeTables are the catalog's tables that grow with the work it does: an
// index built on one of them without CONCURRENTLY blocks its writes for as long
// as the build scans it, and a rewrite of one blocks everything for as long.
var LargeTables = []string{"runs", "steps", "attempts", "events", "step_deps", "run_labels",
	"attempt_log_chunks", "signals", "map_items", "operation_runs", "schedule_events"}

// lockRule is a statement form and the lock level it takes.
type lockRule struct {
	re    *regexp.Regexp
	level string
}

// lockRules are the statements a migration's Up may hold, with the table lock
// each takes (PostgreSQL's documentation, "Explicit Locking"); the strongest
// one found must not exceed the declared level.
var lockRules = []lockRule{
	{regexp.MustCompile(`(?i)\bCREATE\s+(UNIQUE\s+)?INDEX\s+CONCURRENTLY\b`), "SHARE UPDATE EXCLUSIVE"},
	{regexp.MustCompile(`(?i)\bCREATE\s+(UNIQUE\s+)?INDEX\s+(IF\s+NOT\s+EXISTS\s+)?[a-z_0-9]*\s*ON\b`), "SHARE"},
	{regexp.MustCompile(`(?i)\bCREATE\s+(OR\s+REPLACE\s+)?(CONSTRAINT\s+)?TRIGGER\b`), "SHARE ROW EXCLUSIVE"},
	{regexp.MustCompile(`(?i)\bALTER\s+TABLE\b`), "ACCESS EXCLUSIVE"},
	{regexp.MustCompile(`(?i)\bDROP\s+(TABLE|TRIGGER)\b`), "ACCESS EXCLUSIVE"},
	{regexp.MustCompile(`(?i)\bDROP\s+INDEX\s+(IF\s+EXISTS\s+)?[a-z_]`), "ACCESS EXCLUSIVE"},
	{regexp.MustCompile(`(?i)\b(VACUUM\s+FULL|CLUSTER|REINDEX\s+TABLE)\b`), "ACCESS EXCLUSIVE"},
	{regexp.MustCompile(`(?i)\b(UPDATE|DELETE\s+FROM|INSERT\s+INTO)\s+(runs|steps|attempts|events)\b`), "ROW EXCLUSIVE"},
}

var (
	// indexOn finds the table of a CREATE INDEX without CONCURRENTLY.
	indexOn = regexp.MustCompile(`(?i)\bCREATE\s+(UNIQUE\s+)?INDEX\s+(IF\s+NOT\s+EXISTS\s+)?[a-z_0-9]*\s*ON\s+(ONLY\s+)?([a-z_0-9]+)`)
	// rewrites are the ALTER TABLE forms that rewrite the table under ACCESS
	// EXCLUSIVE: a column's type changed, a column added with a volatile
	// default, SET LOGGED/UNLOGGED, SET ACCESS METHOD; and VACUUM FULL, CLUSTER.
	rewrites = regexp.MustCompile(`(?is)\bALTER\s+TABLE\s+(ONLY\s+)?([a-z_0-9]+)\b[^;]*?(\bALTER\s+(COLUMN\s+)?[a-z_0-9]+\s+(SET\s+DATA\s+)?TYPE\b|\bADD\s+(COLUMN\s+)?[^;]*\bDEFAULT\s+(now|clock_timestamp|random|gen_random_uuid|nextval)\s*\(|\bSET\s+(LOGGED|UNLOGGED|ACCESS\s+METHOD)\b)`)
	// drops are what only a contract migration may remove. A dropped constraint
	// is not among them: it loosens what the schema accepts, and what an older
	// binary writes still passes (migration 00051 dropped foreign keys in an
	// expand phase).
	drops = regexp.MustCompile(`(?i)\b(DROP\s+(TABLE|FUNCTION|TRIGGER|TYPE|VIEW)|ALTER\s+TABLE\s+[^;]*\bDROP\s+COLUMN|ALTER\s+TABLE\s+[^;]*\bRENAME\b)`)
)

// Lint checks what a migration after LastUndeclared declares against its Up
// section: its declared lock level covers every statement's (lockRules); no
// index is built on a large table without CONCURRENTLY; no large table is
// rewritten; an expand migration drops and renames nothing. It returns each
// problem found.
func Lint(info Info, text string) []string {
	up, _, _ := strings.Cut(text, "-- +goose Down")
	if _, after, ok := strings.Cut(up, "-- +goose Up"); ok {
		up = after
	}
	up = dollarQuoted.ReplaceAllString(stripComments(up), "$$$$")
	var problems []string
	declared := LockLevel(info.Locks)
	for _, r := range lockRules {
		if r.re.MatchString(up) && LockLevel(r.level) > declared {
			problems = append(problems, fmt.Sprintf("%s: takes %s (%q) but declares %q", info.Name, r.level, r.re.FindString(up), info.Locks))
		}
	}
	for _, m := range indexOn.FindAllStringSubmatch(up, -1) {
		if isLarge(m[4]) && !strings.Contains(strings.ToUpper(m[0]), "CONCURRENTLY") {
			problems = append(problems, fmt.Sprintf("%s: CREATE INDEX on %s, a large table, without CONCURRENTLY (a NO TRANSACTION migration)", info.Name, m[4]))
		}
	}
	for _, m := range rewrites.FindAllStringSubmatch(up, -1) {
		if isLarge(m[2]) {
			problems = append(problems, fmt.Sprintf("%s: rewrites %s, a large table, under ACCESS EXCLUSIVE (%q): add a column and backfill it in batches instead", info.Name, m[2], strings.TrimSpace(m[3])))
		}
	}
	if info.Phase == PhaseExpand {
		if m := drops.FindString(up); m != "" {
			problems = append(problems, fmt.Sprintf("%s: an expand migration removes or renames (%q): that is a contract migration's, once no binary of the previous release uses it", info.Name, m))
		}
	}
	return problems
}

func isLarge(table string) bool {
	for _, t := range LargeTables {
		if strings.EqualFold(t, table) {
			return true
		}
	}
	return false
}

// dollarQuoted is a function's body: its statements run when it is called, not
// by the migration.
var dollarQuoted = regexp.MustCompile(`(?s)\$\$.*?\$\$`)

// stripComments removes -- comments, which may quote statements.
func stripComments(sql string) string {
	var b strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}
