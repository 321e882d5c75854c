package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"
)

// Text PostgreSQL refuses. A text or jsonb value cannot hold U+0000 (as a raw byte
// or as the escape \u0000), bytes that are not UTF-8, or (jsonb) a \u escape of half
// a surrogate pair. Huma's schema validation has no words for these, and Go's JSON
// decoder lets them through (into a string it turns invalid UTF-8 and lone
// surrogates into U+FFFD but keeps NUL; into a json.RawMessage it keeps every byte).
// Sent to PostgreSQL they fail the statement (22021, 22P05, 22P02), which used to
// be a 500. So every operation's input is checked, in one walk over its parameters
// and body (withTextChecks), before the handler runs: a bad value is a 422 naming
// its location, like Huma's own validation errors. catalog.ErrInvalidInput (a 400)
// stays as the last line of defence for a value that got past.

// withTextChecks wraps an operation's handler: the input's parameters and body are
// checked by checkText first.
func withTextChecks[I, O any](h func(context.Context, *I) (*O, error)) func(context.Context, *I) (*O, error) {
	return func(ctx context.Context, in *I) (*O, error) {
		if err := checkText(in); err != nil {
			return nil, err
		}
		return h(ctx, in)
	}
}

// checkText returns a *validationError (a 422) listing every parameter (path,
// query, header fields of in) and body value (the Body field, json.RawMessage values
// included, to any depth) whose text PostgreSQL would refuse, or nil. in is a
// pointer to an operation's input struct. Fields without a parameter tag outside
// Body, and unexported fields (streamed bodies), are not parameters and are skipped.
func checkText(in any) error {
	var errs []error
	walkText(reflect.ValueOf(in), "", "", &errs)
	if len(errs) == 0 {
		return nil
	}
	return &validationError{errs: errs}
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// walkText checks v, found at location base+part ("" at the top of the input
// struct). The location is kept in two pieces and joined only where a problem
// is reported or the walk goes deeper than a field: every request walks every
// field of its input, and joining a string per field was most of the walk's
// cost.
func walkText(v reflect.Value, base, part string, errs *[]error) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			walkText(v.Elem(), base, part, errs)
		}
	case reflect.String:
		if base != "" || part != "" {
			if msg := textProblem(v.String()); msg != "" {
				*errs = append(*errs, &huma.ErrorDetail{Location: base + part, Message: msg, Value: v.String()})
			}
		}
	case reflect.Struct:
		top := base == "" && part == ""
		for _, f := range textFieldsOf(v.Type(), top) {
			fv := v.Field(f.index)
			switch {
			case f.embedded:
				walkText(fv, base, part, errs)
			case top:
				walkText(fv, f.loc, "", errs)
			case part == "":
				walkText(fv, base, f.loc, errs)
			default:
				walkText(fv, base+part, f.loc, errs)
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type() == rawMessageType {
			if base != "" || part != "" {
				if at, msg := jsonTextProblem(v.Bytes()); msg != "" {
					*errs = append(*errs, &huma.ErrorDetail{Location: base + part + at, Message: msg})
				}
			}
			return
		}
		if v.Type().Elem().Kind() == reflect.Uint8 || v.Len() == 0 {
			return // bytes, not text; or nothing
		}
		loc := base + part
		for i := range v.Len() {
			walkText(v.Index(i), loc, "["+strconv.Itoa(i)+"]", errs)
		}
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String || v.Len() == 0 {
			return
		}
		loc := base + part
		iter := v.MapRange()
		for iter.Next() {
			k := iter.Key().String()
			if msg := textProblem(k); msg != "" {
				*errs = append(*errs, &huma.ErrorDetail{Location: loc, Message: "key " + msg, Value: k})
				continue
			}
			walkText(iter.Value(), loc, "."+truncate(k, maxEchoed), errs)
		}
	}
}

// textField is a field walkText visits: its index, and its location: at the top
// of an input struct the whole of it ("path.id", "body"), inside the body the
// part after its parent's (".input"); an embedded struct's fields are at its
// parent's location.
type textField struct {
	index    int
	embedded bool
	loc      string
}

type textFieldsKey struct {
	t   reflect.Type
	top bool
}

// textFields caches textFieldsOf: the fields of the input and body types of
// the registered operations, a fixed set.
var textFields sync.Map // textFieldsKey → []textField

// textFieldsOf returns the fields of struct type t that walkText visits, top
// when t is an operation's input struct (or embedded in it), else a body's.
func textFieldsOf(t reflect.Type, top bool) []textField {
	key := textFieldsKey{t, top}
	if fs, ok := textFields.Load(key); ok {
		return fs.([]textField)
	}
	var fs []textField
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if f.Anonymous {
			fs = append(fs, textField{index: i, embedded: true})
			continue
		}
		if loc, ok := fieldLocation(top, f); ok {
			fs = append(fs, textField{index: i, loc: loc})
		}
	}
	textFields.Store(key, fs)
	return fs
}

// fieldLocation returns the location of the struct field f as Huma names it:
// at the top of an input struct "path.id", "query.workflow",
// "header.Idempotency-Key" or "body"; inside a body the part after its
// parent's, ".input". ok is false for a field that is neither a parameter nor
// (part of) the body. f is not embedded.
func fieldLocation(top bool, f reflect.StructField) (string, bool) {
	if top {
		for _, in := range []string{"path", "query", "header"} {
			if name, _, _ := strings.Cut(f.Tag.Get(in), ","); name != "" {
				return in + "." + name, true
			}
		}
		if f.Name == "Body" {
			return "body", true
		}
		return "", false
	}
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	switch name {
	case "-":
		return "", false
	case "":
		name = f.Name
	}
	return "." + name, true
}

// textProblem says why PostgreSQL would refuse s as text, or "".
func textProblem(s string) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "contains a NUL character (U+0000), which cannot be stored"
	}
	return ""
}

// jsonTextProblem says why PostgreSQL would refuse the JSON document b as jsonb
// because of the text in its strings or keys (a NUL, raw or escaped; bytes that are
// not UTF-8; an escaped half of a surrogate pair), and where: at is the path of the
// value or key inside b (".a.b[2]", "" for b itself). msg is "" when b is fine.
// The document's syntax is not checked (the decoder has done that).
func jsonTextProblem(b []byte) (at, msg string) {
	off, msg := firstBadText(b)
	if msg == "" {
		return "", ""
	}
	return jsonPathAt(b, off), msg
}

// firstBadText returns the offset in the JSON document b of the first text
// PostgreSQL refuses, and why; msg is "" when there is none.
func firstBadText(b []byte) (off int, msg string) {
	inString := false
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return i, "is not valid UTF-8"
			}
			i += size
		case c == 0:
			return i, "contains a NUL character (U+0000), which cannot be stored"
		case !inString:
			inString = c == '"'
			i++
		case c == '"':
			inString = false
			i++
		case c == '\\' && i+1 < len(b) && b[i+1] == 'u':
			u, ok := hex4(b[i+2:])
			switch {
			case !ok:
				i += 2
			case u == 0:
				return i, `contains a NUL character (\u0000), which cannot be stored`
			case u >= 0xdc00 && u <= 0xdfff:
				return i, fmt.Sprintf(`contains an unpaired surrogate (\u%04x): not a Unicode character`, u)
			case u >= 0xd800 && u <= 0xdbff:
				low, ok := uint16(0), i+12 <= len(b) && b[i+6] == '\\' && b[i+7] == 'u'
				if ok {
					low, ok = hex4(b[i+8:])
				}
				if !ok || low < 0xdc00 || low > 0xdfff {
					return i, fmt.Sprintf(`contains an unpaired surrogate (\u%04x): not a Unicode character`, u)
				}
				i += 12
			default:
				i += 6
			}
		case c == '\\':
			i += 2 // an escaped character, the backslash included
		default:
			i++
		}
	}
	return 0, ""
}

// hex4 reads four hexadecimal digits.
func hex4(b []byte) (uint16, bool) {
	if len(b) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return uint16(n), err == nil
}

// jsonPathAt returns the path (".a.b[2]") of the value or key of the JSON document
// b that holds the byte at off, walking the document's tokens; "" for the document
// itself or when b does not parse.
func jsonPathAt(b []byte, at int) string {
	off := int64(at)
	type frame struct {
		object  bool
		wantKey bool
		key     string
		index   int
	}
	var stack []frame
	pathOf := func(stack []frame) string {
		var sb strings.Builder
		for _, f := range stack {
			if f.object {
				sb.WriteString("." + f.key)
			} else {
				sb.WriteString("[" + strconv.Itoa(f.index) + "]")
			}
		}
		return sb.String()
	}
	path := func() string { return pathOf(stack) }
	// valueDone moves the innermost container past the value just read.
	valueDone := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].object {
				stack[n-1].wantKey = true
			} else {
				stack[n-1].index++
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return path()
		}
		end := dec.InputOffset()
		top := len(stack) - 1
		if top >= 0 && stack[top].object && stack[top].wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:top]
				valueDone()
				continue
			}
			key, _ := tok.(string)
			if off >= start && off < end {
				return pathOf(stack[:top]) // the key itself: the location of its object
			}
			stack[top].key, stack[top].wantKey = truncate(key, maxEchoed), false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{object: true, wantKey: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		case json.Delim(']'), json.Delim('}'):
			stack = stack[:top]
			valueDone()
		default:
			if off >= start && off < end {
				return path()
			}
			valueDone()
		}
	}
}
