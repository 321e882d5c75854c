package bundle

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrInvalid is matched (errors.Is) by every error that rejects a bundle for what it
// contains: a hostile or malformed archive, a limit exceeded, an invalid manifest. Such
// an error is the uploader's fault (an HTTP 400, or 413 when it also matches
// ErrTooLarge). Errors that do not match ErrInvalid are I/O failures, context
// cancellation or bugs, and are not the uploader's fault.
var ErrInvalid = errors.New("invalid bundle")

// ErrTooLarge is matched (errors.Is) by the errors that reject a bundle because it
// exceeds one of its Limits: too many entries, a file, the whole tree, the manifest or
// the compressed archive too large. Every error matching ErrTooLarge also matches
// ErrInvalid; an API may map it to 413 instead of 400.
var ErrTooLarge = errors.New("bundle too large")

// ValidationError describes one violation in a bundle. It matches ErrInvalid, and
// ErrTooLarge when TooLarge is set. Manifest validation returns several of them joined
// with errors.Join; use ValidationErrors to list them.
type ValidationError struct {
	// Path is the archive entry the error is about ("bin/fetch"), ManifestPath for an
	// error in the manifest, or empty for the archive as a whole ("not gzip").
	Path string
	// Step is the key of the manifest step the error is about, if any.
	Step string
	// Field is the manifest field, as a path into the document: "name",
	// "steps[2].needs", "defaults.retry.delay". Empty for archive errors.
	Field string
	// Message says what is wrong, in lower case, naming the offending value.
	Message string
	// TooLarge is set when a limit was exceeded (see ErrTooLarge).
	TooLarge bool
	// byPlace: Step is the key of more than one step, so Error names the step by
	// its place in the list (Field) instead.
	byPlace bool
}

// Error formats the error as `entry "../x": path leaves the bundle` for an archive
// entry, `cairn.yaml: step "b": needs: needs unknown step "z"` for the manifest, and
// the bare message for the archive as a whole. A step is named by its key, as the
// user wrote it, not by its place in the list; only an error about the key itself
// (missing, malformed or duplicated) names the place (`steps[2].key`).
func (e *ValidationError) Error() string {
	switch {
	case e.Path == ManifestPath:
		return ManifestPath + ": " + e.Describe()
	case e.Path != "":
		return fmt.Sprintf("entry %q: %s", e.Path, e.Describe())
	}
	return e.Describe()
}

// Describe is Error without the file the error is in: `step "b": needs: needs
// unknown step "z"`, for a report that names the file apart (an API problem's
// location).
func (e *ValidationError) Describe() string {
	var b strings.Builder
	if step, field := e.stepField(); step != "" {
		b.WriteString(step)
		b.WriteString(": ")
		if field != "" {
			b.WriteString(field)
			b.WriteString(": ")
		}
	} else if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// reStepPlace is the place of a step in the manifest's lists, at the head of a
// Field: "steps[1]" or "on_failure[0]", then the field inside the step.
var reStepPlace = regexp.MustCompile(`^(steps|on_failure)\[\d+\](?:\.|$)`)

// stepField returns how Error names the step the error is about (`step "b"`, or
// `on_failure step "n"`) and the field inside it ("when", "retry.delay"); "" when
// the step has no key to name it by, or the key itself is at fault.
func (e *ValidationError) stepField() (step, field string) {
	if e.Step == "" || e.byPlace {
		return "", ""
	}
	loc := reStepPlace.FindStringSubmatch(e.Field)
	if loc == nil {
		return fmt.Sprintf("step %q", e.Step), e.Field
	}
	field = e.Field[len(loc[0]):]
	if field == "key" {
		return "", ""
	}
	if loc[1] == "on_failure" {
		return fmt.Sprintf("on_failure step %q", e.Step), field
	}
	return fmt.Sprintf("step %q", e.Step), field
}

// Is reports whether target is ErrInvalid, or ErrTooLarge for a TooLarge error.
func (e *ValidationError) Is(target error) bool {
	return target == ErrInvalid || (e.TooLarge && target == ErrTooLarge)
}

// ValidationErrors returns every *ValidationError inside err, in order, looking through
// errors.Join trees and %w wrapping. It returns nil when there are none.
func ValidationErrors(err error) []*ValidationError {
	var out []*ValidationError
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *ValidationError:
			out = append(out, e)
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return out
}

// entryError returns a ValidationError about the archive entry p.
func entryError(p, format string, args ...any) *ValidationError {
	return &ValidationError{Path: p, Message: fmt.Sprintf(format, args...)}
}

// tooLarge returns a TooLarge ValidationError about the archive entry p (or the whole
// archive when p is empty).
func tooLarge(p, format string, args ...any) *ValidationError {
	return &ValidationError{Path: p, Message: fmt.Sprintf(format, args...), TooLarge: true}
}

// archiveError returns a ValidationError about the archive as a whole.
func archiveError(format string, args ...any) *ValidationError {
	return &ValidationError{Message: fmt.Sprintf(format, args...)}
}

// fieldError returns a ValidationError about a manifest field.
func fieldError(step, field, format string, args ...any) *ValidationError {
	return &ValidationError{Path: ManifestPath, Step: step, Field: field, Message: fmt.Sprintf(format, args...)}
}
