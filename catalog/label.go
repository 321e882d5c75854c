package catalog

import (
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"
)

// Limits of a run's labels (runs.labels).
const (
	// MaxLabels is the most labels a run carries.
	MaxLabels = 32
	// MaxLabelValue is the longest label value, in bytes of UTF-8.
	MaxLabelValue = 256
)

// labelKey is the rule of label keys: that of step keys.
var labelKey = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Labels are a run's labels, given at start: key → value. The column is a JSON
// object (runs.labels); a run without labels has an empty one.
type Labels map[string]string

// Scan implements sql.Scanner.
func (l *Labels) Scan(src any) error {
	return scanObject(l, src)
}

// scanObject scans a jsonb object column into a map: an empty map, never nil, for
// NULL.
func scanObject[M ~map[string]V, V any](dst *M, src any) error {
	var b []byte
	switch v := src.(type) {
	case nil:
		*dst = M{}
		return nil
	case []byte:
		b = v
	case string:
		b = []byte(v)
	default:
		return fmt.Errorf("scan %T into %T", src, *dst)
	}
	m := M{}
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("scan %T: %w", *dst, err)
	}
	*dst = m
	return nil
}

// Value implements driver.Valuer: the JSON object ({} for none), as text (see
// JSON.Value).
func (l Labels) Value() (driver.Value, error) {
	if l == nil {
		return "{}", nil
	}
	b, err := json.Marshal(map[string]string(l))
	return string(b), err
}

// LabelProblem says why a label key and value break the rules (a key like a step
// key, ^[a-z0-9][a-z0-9_-]{0,62}$; a value of at most MaxLabelValue bytes of UTF-8
// without NUL), or "" when they do not.
func LabelProblem(key, value string) string {
	switch {
	case !labelKey.MatchString(key):
		return "a label key is 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter or digit"
	case len(value) > MaxLabelValue:
		return fmt.Sprintf("a label value is at most %d bytes", MaxLabelValue)
	case !utf8.ValidString(value):
		return "a label value is UTF-8"
	case strings.IndexByte(value, 0) >= 0:
		return "a label value cannot hold a NUL character (U+0000)"
	}
	return ""
}

// check returns ErrInvalidInput naming the first bad label, or nil.
func (l Labels) check() error {
	if len(l) > MaxLabels {
		return fmt.Errorf("%w: %d labels, at most %d", ErrInvalidInput, len(l), MaxLabels)
	}
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if msg := LabelProblem(k, l[k]); msg != "" {
			return fmt.Errorf("%w: label %q: %s", ErrInvalidInput, k, msg)
		}
	}
	return nil
}
