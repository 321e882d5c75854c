package api

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestJSONTextProblem(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, doc string
		at        string // "" with bad false: no problem
		bad       bool
	}{
		{name: "plain", doc: `{"a":["x",1,{"b":null}],"c":"\u00e9\ud83d\ude00\\u0000"}`},
		{name: "escaped backslash then u0000", doc: `"\\u0000"`},
		{name: "control characters", doc: `"\u0001\u001f\t"`},
		{name: "noncharacters", doc: `"\uffff\ufffe"`},
		{name: "NUL escape", doc: `{"a":"x\u0000"}`, at: ".a", bad: true},
		{name: "NUL escape upper case", doc: `["\U0000"]`}, // not an escape JSON has: the decoder refuses it
		{name: "raw NUL", doc: "[\"a\x00\"]", at: "[0]", bad: true},
		{name: "invalid UTF-8", doc: "{\"a\":{\"b\":[1,\"\xff\"]}}", at: ".a.b[1]", bad: true},
		{name: "truncated UTF-8", doc: "\"\xe2\x82\"", bad: true},
		{name: "overlong UTF-8", doc: "\"\xc0\xaf\"", bad: true},
		{name: "encoded surrogate", doc: "\"\xed\xa0\x80\"", bad: true},
		{name: "lone high surrogate", doc: `{"k":"\ud800"}`, at: ".k", bad: true},
		{name: "lone high surrogate at the end", doc: `"\ud800`, bad: true},
		{name: "high surrogate then letter", doc: `"\ud800a"`, bad: true},
		{name: "high surrogate then high", doc: `"\ud800\ud800"`, bad: true},
		{name: "lone low surrogate", doc: `["\uDC00"]`, at: "[0]", bad: true},
		{name: "bad key", doc: `{"a":{"\u0000":1}}`, at: ".a", bad: true},
		{name: "bad key at top", doc: `{"\ud800":1}`, at: "", bad: true},
		{name: "after an empty object", doc: `[{}, [], {"x":[{}, "\u0000"]}]`, at: "[2].x[1]", bad: true},
		{name: "second key", doc: `{"a":1,"b":"\u0000"}`, at: ".b", bad: true},
	}
	for _, tt := range tests {
		at, msg := jsonTextProblem([]byte(tt.doc))
		require.Equal(t, tt.bad, msg != "", "%s: %s", tt.name, msg)
		require.Equal(t, tt.at, at, tt.name)
	}
}

// FuzzJSONTextProblem checks jsonTextProblem against Go's decoder: a document it
// finds fine decodes to strings without NUL and without U+FFFD (which the decoder
// puts for invalid UTF-8 and unpaired surrogates) unless the document wrote U+FFFD
// itself; a document it refuses decodes to a NUL or a U+FFFD somewhere.
func FuzzJSONTextProblem(f *testing.F) {
	for _, seed := range []string{`{"a":"\u0000"}`, `"\ud800"`, `"\ud83d\ude00"`, "\"\xff\"", `"\\u0000"`,
		`{"\udc00":[1,"x"]}`, `["\ufffd", "\uFFFD"]`, "[\"\xef\xbf\xbd\"]", `"\ud800\u0041"`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		_, msg := jsonTextProblem(doc)
		var v any
		if json.Unmarshal(doc, &v) != nil {
			return
		}
		nul, replacement := false, false
		var walk func(any)
		walk = func(v any) {
			switch x := v.(type) {
			case string:
				nul = nul || strings.ContainsRune(x, 0)
				replacement = replacement || strings.ContainsRune(x, utf8.RuneError)
			case []any:
				for _, e := range x {
					walk(e)
				}
			case map[string]any:
				for k, e := range x {
					walk(k)
					walk(e)
				}
			}
		}
		walk(v)
		wroteReplacement := bytes.Contains(doc, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(doc), []byte(`\ufffd`))
		if msg == "" {
			require.False(t, nul, "%q decodes to a NUL", doc)
			require.True(t, !replacement || wroteReplacement, "%q decodes to U+FFFD", doc)
		} else {
			require.True(t, nul || replacement, "%q refused (%s) but decodes cleanly", doc, msg)
		}
	})
}

func TestCheckTextLocations(t *testing.T) {
	t.Parallel()
	type body struct {
		Name  string            `json:"name"`
		Input json.RawMessage   `json:"input"`
		Tags  []string          `json:"tags"`
		Meta  map[string]string `json:"meta"`
		Skip  string            `json:"-"`
		Bytes []byte            `json:"bytes"`
	}
	type Embedded struct {
		ID string `path:"id"`
	}
	in := &struct {
		Embedded
		Filter   string `query:"filter,explode"`
		Key      string `header:"Idempotency-Key"`
		Untagged string
		Body     *body
		hidden   string
	}{
		Embedded: Embedded{ID: "a\x00"},
		Filter:   "\xff", Key: "ok", Untagged: "\x00", hidden: "\x00",
		Body: &body{Name: "n\x00", Input: json.RawMessage(`{"a":["\ud800"]}`), Tags: []string{"x", "\x00"},
			Meta: map[string]string{"k\x00": "v", "k": "\xfe"}, Skip: "\x00", Bytes: []byte{0, 0xff}},
	}
	err := checkText(in)
	var invalid *validationError
	require.ErrorAs(t, err, &invalid)
	p := classValidationFailed.problem("validation failed", invalid.errs...)
	require.Equal(t, 422, p.Status)
	var locs []string
	for _, e := range p.Errors {
		locs = append(locs, e.Location)
	}
	require.ElementsMatch(t, []string{"path.id", "query.filter", "body.name", "body.input.a[0]", "body.tags[1]", "body.meta", "body.meta.k"}, locs)

	require.NoError(t, checkText(&struct {
		Name string `path:"name"`
		Body struct {
			Input json.RawMessage `json:"input"`
		}
	}{Name: "é", Body: struct {
		Input json.RawMessage `json:"input"`
	}{Input: json.RawMessage(`"\ud83d\ude00"`)}}))
}
