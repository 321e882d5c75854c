// Package expr evaluates Cairn's expressions: CEL (https://cel.dev), one language for
// every expression of a manifest (a sleep's until, a hook's input and idempotency
// key, a step's when, a map's over). Expressions are compiled when a bundle is
// deployed, so that a bad one is refused then, naming its step and field; they are
// evaluated in Go, never in SQL, once per decision (when a step becomes ready, when
// a run is created), and an evaluation that fails fails the step with code
// "expression" (Code).
//
// An expression sees the names of its Env: for a step, input (the run's input),
// deps (step key → output), params, labels, run ({id, workflow, version}) and, in a
// map instance, item and index; for a webhook, body and headers. Values are JSON as
// decoded by encoding/json, except that integral numbers are integers, so that
// `deps.split.count > 0` and `input.n + 1` mean what they say. An output stored in
// the blob store is seen as its reference ({"$blob": {...}}): an expression that
// reaches inside it fails with an error naming the step.
package expr

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	lru "github.com/hashicorp/golang-lru/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/cairnrun/cairn/blobstore"
)

// Code is the error code of a step whose expression failed at run time.
const Code = "expression"

// Names an expression may use.
const (
	Input   = "input"
	Deps    = "deps"
	Params  = "params"
	Labels  = "labels"
	Run     = "run"
	Item    = "item"
	Index   = "index"
	Body    = "body"
	Headers = "headers"
	// Event is a received event ({id, name, data, received_at}): the scope of
	// the expressions of event triggers, waits and cancel_on.
	Event = "event"
)

// costLimit bounds the work of one evaluation (CEL's cost units: roughly one per
// operation and per element a comprehension visits), so that an expression over a
// large input cannot hold a dispatcher.
const costLimit = 10_000_000

// maxSource bounds an expression's text.
const maxSource = 4096

// programCache is how many compiled expressions an Env keeps.
const programCache = 512

// Env is the set of names an expression is compiled against.
type Env struct {
	names []string
	cel   *cel.Env
	// programs are the expressions compiled so far, by source (the most recently
	// used): an expression is evaluated at each decision (each step of a run
	// created, each step made ready), and compiling one costs ten times its
	// evaluation (≈ 63 µs and 27 kB against 6 µs for a concurrency key). A
	// program is immutable and safe for concurrent use.
	programs *lru.Cache[string, *Program]
	// equalities are the results of EqualityOf (nil ones too), by name and source.
	equalities *lru.Cache[string, *Equality]
}

var (
	// StepEnv is the scope of a step's expressions.
	StepEnv = mustEnv(Input, Deps, Params, Labels, Run, Item, Index)
	// CreateEnv is the scope of the expressions evaluated when a run's steps are
	// created (a concurrency key): a step's, without deps, item and index.
	CreateEnv = mustEnv(Input, Params, Labels, Run)
	// HookEnv is the scope of a webhook's expressions: the delivery's JSON body and
	// its headers (lower-case names → the first value).
	HookEnv = mustEnv(Body, Headers)
	// EventEnv is the scope of the expressions that look at a received event: a
	// trigger's if and input (input is null there), a wait_for_event's and a
	// cancel_on's match (input is the run's input).
	EventEnv = mustEnv(Event, Input)
)

func mustEnv(names ...string) *Env {
	opts := make([]cel.EnvOption, 0, len(names)+2)
	for _, n := range names {
		opts = append(opts, cel.Variable(n, cel.DynType))
	}
	opts = append(opts, cel.CrossTypeNumericComparisons(true), cel.OptionalTypes())
	e, err := cel.NewEnv(opts...)
	if err != nil {
		panic(fmt.Sprintf("expr: CEL environment: %v", err))
	}
	programs, err := lru.New[string, *Program](programCache)
	if err != nil {
		panic(fmt.Sprintf("expr: program cache: %v", err))
	}
	equalities, err := lru.New[string, *Equality](programCache)
	if err != nil {
		panic(fmt.Sprintf("expr: equality cache: %v", err))
	}
	return &Env{names: names, cel: e, programs: programs, equalities: equalities}
}

// Program is a compiled expression.
type Program struct {
	src string
	prg cel.Program
}

// Compile parses and checks src against env. Its error says what is wrong, with the
// position in src; callers add the step and field. The program of a source
// compiled before comes from env's cache.
func (env *Env) Compile(src string) (*Program, error) {
	if p, ok := env.programs.Get(src); ok {
		return p, nil
	}
	p, err := env.compile(src)
	if err != nil {
		return nil, err
	}
	env.programs.Add(src, p)
	return p, nil
}

func (env *Env) compile(src string) (*Program, error) {
	if strings.TrimSpace(src) == "" {
		return nil, errors.New("empty expression")
	}
	if len(src) > maxSource {
		return nil, fmt.Errorf("expression of %d bytes: at most %d", len(src), maxSource)
	}
	ast, iss := env.cel.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("%s (names in scope: %s)", strings.TrimSpace(iss.Err().Error()), strings.Join(env.names, ", "))
	}
	prg, err := env.cel.Program(ast,
		cel.CostLimit(costLimit),
		cel.InterruptCheckFrequency(100),
		cel.CustomDecoratorV2(decorateSizes),
	)
	if err != nil {
		return nil, fmt.Errorf("expression: %w", err)
	}
	return &Program{src: src, prg: prg}, nil
}

// Check reports whether src compiles against env: Compile without the program.
func (env *Env) Check(src string) error {
	_, err := env.Compile(src)
	return err
}

// String returns the expression's source.
func (p *Program) String() string { return p.src }

// Vars are the values of the names in scope. JSON values are given as they are
// stored (json.RawMessage), decoded here; other values as Go values (strings, maps
// of strings, ints).
type Vars map[string]any

// Eval evaluates the program with vars and returns its value as JSON, at most
// MaxValue bytes.
func (p *Program) Eval(ctx context.Context, vars Vars) (json.RawMessage, error) {
	v, err := p.eval(ctx, vars)
	if err != nil {
		return nil, err
	}
	out, err := toJSON(v)
	if err != nil {
		return nil, err
	}
	if len(out) > MaxValue {
		return nil, p.errorf("%v", errTooBig{limit: MaxValue})
	}
	return out, nil
}

// EvalBool evaluates a condition.
func (p *Program) EvalBool(ctx context.Context, vars Vars) (bool, error) {
	v, err := p.eval(ctx, vars)
	if err != nil {
		return false, err
	}
	b, ok := v.(types.Bool)
	if !ok {
		return false, p.errorf("want a bool, got %s", v.Type().TypeName())
	}
	return bool(b), nil
}

// EvalString evaluates an expression whose value is a string; a number is turned
// into its decimal form (an id from a JSON body is often a number).
func (p *Program) EvalString(ctx context.Context, vars Vars) (string, error) {
	v, err := p.eval(ctx, vars)
	if err != nil {
		return "", err
	}
	switch s := v.(type) {
	case types.String:
		return string(s), nil
	case types.Int, types.Uint:
		return fmt.Sprint(s.Value()), nil
	}
	return "", p.errorf("want a string, got %s", v.Type().TypeName())
}

// EvalTime evaluates an expression whose value is a time: a CEL timestamp, or a
// string in RFC 3339.
func (p *Program) EvalTime(ctx context.Context, vars Vars) (time.Time, error) {
	v, err := p.eval(ctx, vars)
	if err != nil {
		return time.Time{}, err
	}
	switch t := v.(type) {
	case types.Timestamp:
		return t.Time, nil
	case types.String:
		at, err := time.Parse(time.RFC3339Nano, string(t))
		if err != nil {
			return time.Time{}, p.errorf("want a time in RFC 3339, got %q", string(t))
		}
		return at, nil
	}
	return time.Time{}, p.errorf("want a time (RFC 3339 string or timestamp), got %s", v.Type().TypeName())
}

// EvalList evaluates an expression whose value is a list and returns its items as
// JSON.
func (p *Program) EvalList(ctx context.Context, vars Vars) ([]json.RawMessage, error) {
	raw, err := p.Eval(ctx, vars)
	if err != nil {
		return nil, err
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || items == nil && !bytes.Equal(bytes.TrimSpace(raw), []byte("[]")) {
		return nil, p.errorf("want a list, got %s", shorten(string(raw)))
	}
	return items, nil
}

// eval evaluates the program. Every value it builds, and its result, is measured
// (sizeMeter): one over MaxValue fails the evaluation.
func (p *Program) eval(ctx context.Context, vars Vars) (ref.Val, error) {
	act := make(map[string]any, len(vars)+1)
	for k, v := range vars {
		d, err := native(v)
		if err != nil {
			return nil, p.errorf("%s: %v", k, err)
		}
		act[k] = d
	}
	meter := newSizeMeter(MaxValue)
	act[meterVar] = meter
	out, _, err := p.prg.ContextEval(ctx, act)
	if err == nil {
		// The result may be a value the expression did not build (`deps`).
		meter.size(out)
	}
	if meter.over != nil {
		return nil, p.errorf("%v", meter.over)
	}
	if err != nil {
		if step := p.blobDep(vars); step != "" {
			return nil, p.errorf("%v: the output of step %s is in the blob store, and an expression sees only its reference ({\"$blob\": …}), not what is inside", err, step)
		}
		return nil, p.errorf("%v", err)
	}
	return out, nil
}

// blobDep returns the key of a step whose output is a $blob reference and whose name
// the expression mentions (deps.KEY or deps["KEY"]), or "".
func (p *Program) blobDep(vars Vars) string {
	deps, ok := vars[Deps]
	if !ok {
		return ""
	}
	var m map[string]json.RawMessage
	switch d := deps.(type) {
	case map[string]json.RawMessage:
		m = d
	case json.RawMessage:
		_ = json.Unmarshal(d, &m)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if _, ok := blobstore.ParseRef(m[k]); !ok {
			continue
		}
		mention := regexp.MustCompile(`deps\s*(\.\s*` + regexp.QuoteMeta(k) + `\b|\[\s*["']` + regexp.QuoteMeta(k) + `["']\s*\])`)
		if mention.MatchString(p.src) {
			return k
		}
	}
	return ""
}

// Error is an expression that failed at run time.
type Error struct {
	Expr string
	Msg  string
}

func (e *Error) Error() string {
	return fmt.Sprintf("expression %q: %s", shorten(e.Expr), e.Msg)
}

func (p *Program) errorf(format string, args ...any) error {
	return &Error{Expr: p.src, Msg: fmt.Sprintf(format, args...)}
}

func shorten(s string) string {
	if len(s) > 120 {
		return s[:117] + "..."
	}
	return s
}

// native turns a variable's value into what CEL takes: JSON decoded with integral
// numbers as int64, maps of raw JSON decoded per value.
func native(v any) (any, error) {
	switch x := v.(type) {
	case nil:
		return types.NullValue, nil
	case json.RawMessage:
		if len(bytes.TrimSpace(x)) == 0 {
			return types.NullValue, nil
		}
		return decodeJSON(x)
	case []byte:
		return decodeJSON(x)
	case map[string]json.RawMessage:
		out := make(map[string]any, len(x))
		for k, raw := range x {
			d, err := native(raw)
			if err != nil {
				return nil, err
			}
			out[k] = d
		}
		return out, nil
	case map[string]string, string, int, int64, bool, float64, map[string]any, []any:
		return x, nil
	}
	return nil, fmt.Errorf("unsupported value of type %T", v)
}

func decodeJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode JSON: %w", err)
	}
	return numbers(v), nil
}

// numbers replaces json.Number with int64 when integral and in range, else float64.
func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
		return x
	case nil:
		return types.NullValue
	}
	return v
}

var structValue = reflect.TypeFor[*structpb.Value]()

// toJSON marshals a CEL value as JSON.
func toJSON(v ref.Val) (json.RawMessage, error) {
	switch x := v.(type) {
	case types.Int:
		return json.RawMessage(fmt.Sprint(int64(x))), nil
	case types.Uint:
		return json.RawMessage(fmt.Sprint(uint64(x))), nil
	case types.Double:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("the value %v is not JSON", f)
		}
	case types.Timestamp:
		return json.Marshal(x.Time.UTC().Format(time.RFC3339Nano))
	case types.Duration:
		return json.Marshal(x.Duration.String())
	}
	pv, err := v.ConvertToNative(structValue)
	if err != nil {
		return nil, fmt.Errorf("the value (%s) is not JSON: %w", v.Type().TypeName(), err)
	}
	b, err := protojson.Marshal(pv.(*structpb.Value))
	if err != nil {
		return nil, err
	}
	return compact(b), nil
}

func compact(b []byte) json.RawMessage {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b
	}
	return out.Bytes()
}
