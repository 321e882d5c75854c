package bundle

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/invopop/jsonschema"
	jsv "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// schemaPath is the committed JSON Schema of cairn.yaml, from this package's
// folder. Editors read it (docs/cairn-yaml-schema.md).
const schemaPath = "../docs/cairn.schema.json"

var updateSchema = flag.Bool("update-schema", false, "write "+schemaPath+" from the manifest types")

// manifestSchema generates the JSON Schema of cairn.yaml from Manifest and
// the types it holds: their yaml field names, required fields (those without
// omitempty), no unknown fields (ParseManifest refuses them too), descriptions
// from the Go doc comments, and, for the types that read more than one shape of
// YAML (UnmarshalYAML), each shape they accept.
func manifestSchema(t *testing.T) []byte {
	t.Helper()
	r := &jsonschema.Reflector{FieldNameTag: "yaml", Mapper: schemaShapes, Namer: func(t reflect.Type) string { return t.Name() }}
	require.NoError(t, r.AddGoComments("github.com/cairnrun/cairn/bundle", "./"))
	s := r.Reflect(&Manifest{})
	s.ID = "https://github.com/cairnrun/cairn/docs/cairn.schema.json"
	s.Title = "cairn.yaml"
	s.Description = "A Cairn workflow: the manifest of a bundle (docs/functions.md). Generated from the Go types of package bundle by TestManifestSchema; the server's validation (cairn validate) checks more than the schema can: names, needs, cycles, expressions, cron."
	// Exactly one kind per step; names and keys of their syntax (validate.go).
	oneKind := func(kinds ...string) []*jsonschema.Schema {
		out := make([]*jsonschema.Schema, len(kinds))
		for i, k := range kinds {
			out[i] = &jsonschema.Schema{Required: []string{k}}
		}
		return out
	}
	s.Definitions["Step"].OneOf = oneKind("exec", "http", "lambda", "builtin", "sleep", "signal", "approval", "workflow", "wait_for_event")
	for def, fields := range schemaPatterns {
		for field, pattern := range fields {
			prop, ok := s.Definitions[def].Properties.Get(field)
			require.True(t, ok, "%s has no field %s", def, field)
			if prop.Type == "array" {
				prop = prop.Items
			}
			prop.Pattern = pattern
		}
	}
	// A compensate body is a step without a key of its own (condition.go):
	// validation says which of a step's fields it may have.
	step := *s.Definitions["Step"]
	step.Required = nil
	step.Description = "Compensate is a step-like body (exec, http, lambda or builtin, with its with, env, timeout and retry), run when the run fails after its step succeeded."
	step.OneOf = oneKind("exec", "http", "lambda", "builtin")
	s.Definitions["CompensateStep"] = &step
	props := jsonschema.NewProperties()
	for p := s.Definitions["Step"].Properties.Oldest(); p != nil; p = p.Next() {
		v := p.Value
		if p.Key == "compensate" {
			v = &jsonschema.Schema{Ref: "#/$defs/CompensateStep", Description: v.Description}
		}
		props.Set(p.Key, v)
	}
	s.Definitions["Step"].Properties = props
	for name, fields := range schemaEnums {
		def := s.Definitions[name]
		require.NotNil(t, def, "no definition %s", name)
		for field, values := range fields {
			prop, ok := def.Properties.Get(field)
			require.True(t, ok, "%s has no field %s", name, field)
			if prop.Type == "array" {
				prop = prop.Items
			}
			prop.Enum = values
		}
	}
	for _, def := range s.Definitions {
		tidyDescriptions(def)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	require.NoError(t, err)
	return append(b, '\n')
}

// reSourceNote is a note of a Go comment that means nothing in an editor: the
// source file a rule comes from.
var reSourceNote = regexp.MustCompile(` ?\(([a-z_]+\.go)\)|; [a-z_]+\.go\b`)

// tidyDescriptions makes the descriptions of s and the schemas in it read as an
// editor shows them: one paragraph, without notes on where the rule lives.
func tidyDescriptions(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	s.Description = reSourceNote.ReplaceAllString(strings.Join(strings.Fields(s.Description), " "), "")
	if s.Properties != nil {
		for p := s.Properties.Oldest(); p != nil; p = p.Next() {
			tidyDescriptions(p.Value)
		}
	}
	tidyDescriptions(s.Items)
	for _, sub := range s.AnyOf {
		tidyDescriptions(sub)
	}
}

// schemaEnums are the fields of string type whose values are a fixed list:
// definition name, field, values.
var schemaEnums = map[string]map[string][]any{
	"Hook":         {"signature": {SignatureHMACSHA256, SignatureGitHub, SignatureStripe}},
	"SignalSpec":   {"on_timeout": {"fail", "continue"}},
	"Singleton":    {"mode": {SingletonSkip, SingletonCancelOther, SingletonQueue}},
	"ApprovalSpec": {"on_timeout": {"fail", "continue"}, "roles": {"operator", "admin"}},
}

// schemaPatterns are the syntax of names and keys: definition, field, pattern.
var schemaPatterns = map[string]map[string]string{
	"Manifest":   {"name": reName.String()},
	"Step":       {"key": reKey.String(), "needs": reKey.String()},
	"Hook":       {"name": reKey.String(), "secret": reKey.String()},
	"Schedule":   {"name": reKey.String()},
	"SignalSpec": {"name": reSignalName.String()},
}

// durationPattern is a duration as ParseDuration reads it: "30s", "1h30m", "1.5h",
// "365d", "1d12h".
const durationPattern = `^([0-9]{1,6}d(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))*|[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+)$`

// schemaShapes gives the schema of the manifest's types that are not plain
// structs: those with an UnmarshalYAML of their own, and the named strings with a
// fixed list of values. nil: reflect the type.
func schemaShapes(t reflect.Type) *jsonschema.Schema {
	duration := func() *jsonschema.Schema {
		return &jsonschema.Schema{AnyOf: []*jsonschema.Schema{
			{Type: "string", Pattern: durationPattern},
			{Enum: []any{0, "0"}},
		}, Description: `a duration: a number with a unit, "30s", "5m", "1h30m", "365d"`}
	}
	enum := func(values ...any) *jsonschema.Schema { return &jsonschema.Schema{Type: "string", Enum: values} }
	object := func(props ...string) *jsonschema.Schema {
		s := &jsonschema.Schema{Type: "object", Properties: jsonschema.NewProperties(), AdditionalProperties: jsonschema.FalseSchema}
		for i := 0; i+1 < len(props); i += 2 {
			s.Properties.Set(props[i], &jsonschema.Schema{Type: props[i+1]})
		}
		return s
	}
	switch t {
	case reflect.TypeFor[Duration]():
		return duration()
	case reflect.TypeFor[Value]():
		secret := object("secret", "string")
		secret.Required = []string{"secret"}
		return &jsonschema.Schema{AnyOf: []*jsonschema.Schema{{Type: "string"}, {Type: "number"}, {Type: "boolean"}, secret},
			Description: "a value, or a secret's newest version: {secret: name}"}
	case reflect.TypeFor[Network]():
		allow := object()
		allow.Properties.Set("allow", &jsonschema.Schema{Type: "array", Items: &jsonschema.Schema{Type: "string"}})
		return &jsonschema.Schema{AnyOf: []*jsonschema.Schema{enum(NetworkNone), allow},
			Description: "none, or {allow: [host:port, …]}: ports of the server's loopback the handler may reach"}
	case reflect.TypeFor[SleepSpec]():
		until := object("until", "string")
		until.Required = []string{"until"}
		return &jsonschema.Schema{AnyOf: []*jsonschema.Schema{duration(), until},
			Description: `a duration ("1h"), or {until: "<expression giving an RFC 3339 time>"}`}
	case reflect.TypeFor[Tolerance]():
		return &jsonschema.Schema{AnyOf: []*jsonschema.Schema{{Type: "integer", Minimum: "0"}, {Type: "string", Pattern: `^\s*[0-9]+(\.[0-9]+)?\s*%\s*$`}},
			Description: `a count of failed items (3), or a percentage ("5%")`}
	case reflect.TypeFor[RetentionPeriod]():
		return &jsonschema.Schema{Type: "string", Pattern: `^(forever|[0-9]+d(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))*|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+)$`,
			Description: `days ("7d"), a duration ("36h", "1d12h") or "forever"`}
	case reflect.TypeFor[ChildVersion]():
		return &jsonschema.Schema{AnyOf: []*jsonschema.Schema{{Type: "integer", Minimum: "1"}, {Type: "string"}},
			Description: "a version number, or an alias (stable); unset: latest"}
	case reflect.TypeFor[Backoff]():
		return enum(BackoffFixed, BackoffLinear, BackoffExponential)
	case reflect.TypeFor[OnExhausted]():
		return enum(OnExhaustedFail, OnExhaustedPause)
	case reflect.TypeFor[Overlap]():
		return enum(OverlapSkip, OverlapAllow, OverlapBufferOne, OverlapCancelOther)
	case reflect.TypeFor[TriggerRule]():
		values := make([]any, len(TriggerRules))
		for i, r := range TriggerRules {
			values[i] = r
		}
		return enum(values...)
	}
	return nil
}

// TestManifestSchema keeps docs/cairn.schema.json equal to what the manifest
// types give: a change of a type (a field added, renamed, made optional) fails
// here until the file is regenerated with
//
//	go test ./bundle -run TestManifestSchema -update-schema
func TestManifestSchema(t *testing.T) {
	got := manifestSchema(t)
	if *updateSchema {
		require.NoError(t, os.WriteFile(schemaPath, got, 0o644))
	}
	want, err := os.ReadFile(schemaPath)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got),
		"%s is not what the manifest types give: go test ./bundle -run TestManifestSchema -update-schema", schemaPath)
}

// schemaOnlyValidationCatches lists the invalid fixtures whose mistakes the
// schema cannot see (they need the whole manifest, an expression parser or a
// cron parser): the schema accepts them, validation refuses them. Every other
// invalid fixture must fail the schema too.
var schemaOnlyValidationCatches = map[string]string{
	"bad-cycle.yaml":      "a cycle of needs",
	"bad-durations.yaml":  "durations out of range",
	"bad-alias-bomb.yaml": "the size of the document once its aliases are expanded",
}

// TestManifestSchemaFixtures checks the committed schema against every manifest
// the repository holds: each example's cairn.yaml, each template of cairn init,
// and each valid fixture pass both the schema and validation; each invalid
// fixture fails validation, and fails the schema unless
// schemaOnlyValidationCatches says why it cannot.
func TestManifestSchemaFixtures(t *testing.T) {
	t.Parallel()

	c := jsv.NewCompiler()
	doc, err := jsv.UnmarshalJSON(mustOpen(t, schemaPath))
	require.NoError(t, err)
	require.NoError(t, c.AddResource("cairn.schema.json", doc))
	schema, err := c.Compile("cairn.schema.json")
	require.NoError(t, err)

	valid, err := filepath.Glob("../examples/*/cairn.yaml")
	require.NoError(t, err)
	templates, err := filepath.Glob("../cmd/cairn/templates/*/cairn.yaml")
	require.NoError(t, err)
	inFolder, err := filepath.Glob("../cmd/cairn/templates/*/bundle/cairn.yaml")
	require.NoError(t, err)
	templates = append(templates, inFolder...)
	fixtures, err := filepath.Glob("testdata/manifests/ok-*.yaml")
	require.NoError(t, err)
	valid = append(append(valid, templates...), fixtures...)
	require.Greater(t, len(valid), 15)
	for _, path := range valid {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		data = bytes.ReplaceAll(data, []byte("__NAME__"), []byte("from-template")) // cairn init's placeholder
		m, err := ParseManifest(data)
		require.NoError(t, err, path)
		require.NoError(t, m.Validate(nil), path)
		require.NoError(t, schema.Validate(yamlValue(t, path, data)), "%s: valid, but the schema refuses it", path)
	}

	invalid, err := filepath.Glob("testdata/manifests/bad-*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, invalid)
	for _, path := range invalid {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		m, err := ParseManifest(data)
		if err == nil {
			err = m.Validate(nil)
		}
		require.Error(t, err, "%s is no invalid manifest", path)
		if strings.Contains(path, "alias-bomb") {
			continue // its expansion is what is refused: not something to decode here
		}
		serr := schema.Validate(yamlValue(t, path, data))
		if why, ok := schemaOnlyValidationCatches[filepath.Base(path)]; ok {
			assert.NoError(t, serr, "%s: the schema refuses it now (%s): take it off schemaOnlyValidationCatches", path, why)
		} else {
			assert.Error(t, serr, "%s is invalid (%v), and the schema should say so", path, err)
		}
	}
}

// yamlValue decodes a YAML document (anchors and merge keys resolved) into the
// JSON value an editor's schema check sees.
func yamlValue(t *testing.T, path string, data []byte) any {
	t.Helper()
	var v any
	require.NoError(t, yaml.Unmarshal(data, &v), path)
	b, err := json.Marshal(v)
	require.NoError(t, err, path)
	out, err := jsv.UnmarshalJSON(bytes.NewReader(b))
	require.NoError(t, err, path)
	return out
}

func mustOpen(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}
