// Package snapshot reads catalog/sql, the current definition of every cairn_*
// function and trigger, and writes the migration that takes the database from one
// snapshot to another (go run ./migrations/gen NAME).
//
// A snapshot is a set of .sql files holding only CREATE OR REPLACE FUNCTION and
// CREATE OR REPLACE TRIGGER statements, each under its comment. A function is known
// by its name and input argument types, a trigger by its name and table. Parameters
// are written with names (p_run uuid), as every cairn_* function's are: a parameter
// written as a bare type is read as a name.
package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
)

// Kind tells a function from a trigger.
type Kind int

// The kinds of object a snapshot holds.
const (
	Function Kind = iota
	Trigger
)

// Object is one definition of a snapshot.
type Object struct {
	Kind Kind
	// Key identifies the object across snapshots: for a function its name and
	// input argument types (cairn_sweep_next(interval)), for a trigger its name
	// and table (runs_child_ended ON runs).
	Key string
	// Drop is the statement that removes the object (DROP FUNCTION …(types) or
	// DROP TRIGGER … ON …).
	Drop string
	// Returns is a function's RETURNS clause as written (with its OUT parameters):
	// when it changes, CREATE OR REPLACE cannot replace the function, which is
	// dropped first.
	Returns string
	// SQL is the statement as written, without its leading comment, ending in ';'.
	SQL string
	// File is the snapshot file that holds it.
	File string
}

// Snapshot is every object of a snapshot, in the order of its files (by name) and
// of the statements in each.
type Snapshot []Object

var (
	createFunction = regexp.MustCompile(`(?is)^CREATE\s+OR\s+REPLACE\s+FUNCTION\s+([a-z_][a-z0-9_]*)\s*\(`)
	createTrigger  = regexp.MustCompile(`(?is)^CREATE\s+OR\s+REPLACE\s+(?:CONSTRAINT\s+)?TRIGGER\s+([a-z_][a-z0-9_]*)\s.*?\sON\s+([a-z_][a-z0-9_.]*)\s`)
	returnsClause  = regexp.MustCompile(`(?is)\bRETURNS\s+(.*?)\s+(?:LANGUAGE|AS)\b`)
	spaces         = regexp.MustCompile(`\s+`)
)

// Read parses every .sql file at the root of fsys. It fails on a statement other
// than CREATE OR REPLACE FUNCTION or TRIGGER, and on an object defined twice.
func Read(fsys fs.FS) (Snapshot, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var snap Snapshot
	seen := map[string]string{}
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		objs, err := Parse(name, string(b))
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if first, ok := seen[o.Key]; ok {
				return nil, fmt.Errorf("%s: %s is defined again (first in %s)", name, o.Key, first)
			}
			seen[o.Key] = name
			snap = append(snap, o)
		}
	}
	return snap, nil
}

// Parse reads the statements of one snapshot file.
func Parse(file, text string) ([]Object, error) {
	stmts, err := Split(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var out []Object
	for _, st := range stmts {
		o, err := parseObject(st)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		o.File = file
		out = append(out, o)
	}
	return out, nil
}

func parseObject(st string) (Object, error) {
	if m := createFunction.FindStringSubmatchIndex(st); m != nil {
		name := strings.ToLower(st[m[2]:m[3]])
		params, rest, err := paramList(st[m[1]-1:])
		if err != nil {
			return Object{}, fmt.Errorf("function %s: %w", name, err)
		}
		var in []string
		for _, p := range params {
			if mode, typ := paramModeType(p); mode != "OUT" {
				in = append(in, typ)
			}
		}
		sig := name + "(" + strings.Join(in, ", ") + ")"
		o := Object{Kind: Function, Key: sig, Drop: "DROP FUNCTION " + sig + ";", SQL: st}
		o.Returns = strings.Join(outParams(params), ", ")
		if r := returnsClause.FindStringSubmatch(rest); r != nil {
			o.Returns += " RETURNS " + r[1]
		}
		o.Returns = normalize(o.Returns)
		return o, nil
	}
	if m := createTrigger.FindStringSubmatch(st); m != nil {
		name, table := strings.ToLower(m[1]), strings.ToLower(m[2])
		return Object{Kind: Trigger, Key: name + " ON " + table, Drop: "DROP TRIGGER " + name + " ON " + table + ";", SQL: st}, nil
	}
	first, _, _ := strings.Cut(st, "\n")
	return Object{}, fmt.Errorf("not a CREATE OR REPLACE FUNCTION or TRIGGER: %s", first)
}

// paramList returns the top-level parameters of the list that s opens with '(',
// and the text after its ')'.
func paramList(s string) (params []string, rest string, err error) {
	depth, start := 0, 1
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				if p := strings.TrimSpace(s[start:i]); p != "" {
					params = append(params, p)
				}
				return params, s[i+1:], nil
			}
		case ',':
			if depth == 1 {
				params = append(params, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return nil, "", errors.New("parameter list does not end")
}

// paramModeType splits "[mode] name type [DEFAULT x | = x]" into its mode (IN when
// unwritten) and its type, lower case with single spaces.
func paramModeType(p string) (mode, typ string) {
	fields := strings.Fields(p)
	mode = "IN"
	if len(fields) > 0 {
		switch strings.ToUpper(fields[0]) {
		case "IN", "OUT", "INOUT", "VARIADIC":
			mode, fields = strings.ToUpper(fields[0]), fields[1:]
		}
	}
	if len(fields) > 0 {
		fields = fields[1:] // the name
	}
	var t []string
	for _, f := range fields {
		if strings.EqualFold(f, "DEFAULT") || f == "=" {
			break
		}
		t = append(t, f)
	}
	return mode, strings.ToLower(strings.Join(t, " "))
}

func outParams(params []string) []string {
	var out []string
	for _, p := range params {
		if mode, typ := paramModeType(p); mode == "OUT" || mode == "INOUT" {
			out = append(out, mode+" "+typ)
		}
	}
	return out
}

func normalize(s string) string {
	return strings.ToLower(strings.TrimSpace(spaces.ReplaceAllString(s, " ")))
}

// Split cuts SQL text into statements, each without the comments before it and
// ending in its ';'. It knows -- and /* */ comments, quoted strings and
// identifiers, and dollar-quoted bodies.
func Split(text string) ([]string, error) {
	var out []string
	start := -1
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case strings.HasPrefix(text[i:], "--"):
			j := strings.IndexByte(text[i:], '\n')
			if j < 0 {
				j = len(text) - i
			}
			i += j
			continue
		case strings.HasPrefix(text[i:], "/*"):
			j := strings.Index(text[i+2:], "*/")
			if j < 0 {
				return nil, errors.New("a /* comment does not end")
			}
			i += j + 4
			continue
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			continue
		}
		if start < 0 {
			start = i
		}
		switch c {
		case '\'', '"':
			j := i + 1
			for {
				k := strings.IndexByte(text[j:], c)
				if k < 0 {
					return nil, fmt.Errorf("a %c quote does not end", c)
				}
				j += k + 1
				if j < len(text) && text[j] == c { // doubled: an escaped quote
					j++
					continue
				}
				break
			}
			i = j
			continue
		case '$':
			if tag := dollarTag.FindString(text[i:]); tag != "" {
				k := strings.Index(text[i+len(tag):], tag)
				if k < 0 {
					return nil, fmt.Errorf("body quoted by %s does not end", tag)
				}
				i += len(tag) + k + len(tag)
				continue
			}
		case ';':
			out = append(out, text[start:i+1])
			start = -1
		}
		i++
	}
	if start >= 0 {
		return nil, fmt.Errorf("statement does not end in ';': %.60s", text[start:])
	}
	return out, nil
}

var dollarTag = regexp.MustCompile(`^\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$`)

// Migration is the goose migration that takes a database from snapshot prev to
// next: Up writes what next changed, added or removed, Down puts back prev's.
// Changed reports the keys of the objects it touches; it is empty, and the text
// too, when the snapshots define the same objects with the same statements.
func Migration(prev, next Snapshot, command string) (text string, changed []string) {
	up, changed := delta(prev, next)
	if len(changed) == 0 {
		return "", nil
	}
	down, _ := delta(next, prev)

	var b strings.Builder
	b.WriteString(header(up, changed))
	b.WriteString("-- +goose Up\n")
	fmt.Fprintf(&b, "-- Code generated by %s from catalog/sql; DO NOT EDIT.\n", command)
	b.WriteString("-- The reviewed text is catalog/sql: this file is its change, and its Down the\n")
	b.WriteString("-- previous definitions. It changes:\n")
	for _, c := range changed {
		b.WriteString("--   " + c + "\n")
	}
	b.WriteString("SET LOCAL check_function_bodies = off;\n\n")
	b.WriteString(strings.Join(up, "\n"))
	b.WriteString("\n-- +goose Down\nSET LOCAL check_function_bodies = off;\n\n")
	b.WriteString(strings.Join(down, "\n"))
	return b.String(), changed
}

// header is a generated migration's phase and locks (package migrations, phase.go):
// expand when it only adds or replaces definitions that keep their signature and
// result, which the previous release's binaries call as before; contract when it
// drops one (removed, or a result type changed). CREATE OR REPLACE FUNCTION takes
// no table lock; CREATE TRIGGER takes SHARE ROW EXCLUSIVE on its table, DROP
// TRIGGER ACCESS EXCLUSIVE: each a moment, never a scan.
func header(up, changed []string) string {
	phase := "expand"
	text := strings.Join(up, "\n")
	if strings.Contains(text, "DROP FUNCTION") || strings.Contains(text, "DROP TRIGGER") {
		phase = "contract"
	}
	locks := "none (functions replaced)"
	var tables []string
	for _, c := range changed {
		if _, on, ok := strings.Cut(c, " ON "); ok {
			table, _, _ := strings.Cut(on, " ")
			tables = append(tables, table)
		}
	}
	if len(tables) > 0 {
		level := "SHARE ROW EXCLUSIVE"
		if strings.Contains(text, "DROP TRIGGER") {
			level = "ACCESS EXCLUSIVE"
		}
		locks = level + " on " + strings.Join(tables, ", ") + " (brief: triggers replaced)"
	}
	return "-- cairn-phase: " + phase + "\n-- cairn-locks: " + locks + "\n-- cairn-online: yes\n"
}

// delta is the statements that take a database from snapshot from to snapshot to,
// in the order they run: the drops of what to lacks (triggers before functions),
// then to's new or changed functions, then its new or changed triggers. A function
// whose result type changes is dropped first: CREATE OR REPLACE cannot change it.
// changed names each object, with its file.
func delta(from, to Snapshot) (stmts, changed []string) {
	was := map[string]Object{}
	for _, o := range from {
		was[o.Key] = o
	}
	is := map[string]bool{}
	for _, o := range to {
		is[o.Key] = true
	}
	var dropTrigs, dropFuncs, funcs, trigs []string
	for _, o := range from {
		if is[o.Key] {
			continue
		}
		changed = append(changed, o.Key+" (removed)")
		if o.Kind == Trigger {
			dropTrigs = append(dropTrigs, o.Drop)
		} else {
			dropFuncs = append(dropFuncs, o.Drop)
		}
	}
	for _, o := range to {
		p, ok := was[o.Key]
		if ok && strings.TrimSpace(p.SQL) == strings.TrimSpace(o.SQL) {
			continue
		}
		stmt := "-- catalog/sql/" + o.File + "\n"
		if ok && p.Returns != o.Returns {
			stmt += o.Drop + "\n"
		}
		stmt = block(stmt + strings.TrimSpace(o.SQL))
		if ok {
			changed = append(changed, o.Key+" ("+o.File+")")
		} else {
			changed = append(changed, o.Key+" (new, "+o.File+")")
		}
		if o.Kind == Trigger {
			trigs = append(trigs, stmt)
		} else {
			funcs = append(funcs, stmt)
		}
	}
	for _, list := range [][]string{dropTrigs, dropFuncs, funcs, trigs} {
		stmts = append(stmts, list...)
	}
	return stmts, changed
}

func block(stmt string) string {
	return "-- +goose StatementBegin\n" + stmt + "\n-- +goose StatementEnd\n"
}
