package expr_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/expr"
)

func stepVars() expr.Vars {
	return expr.Vars{
		expr.Input: json.RawMessage(`{"n": 2, "tenant": "acme", "send_at": "2026-12-01T10:00:00Z", "price": 2.5}`),
		expr.Deps: map[string]json.RawMessage{
			"split": json.RawMessage(`{"items": [1, 2, 3], "count": 3}`),
			"big":   json.RawMessage(`{"$blob": {"digest": "sha256:00", "size": 10}}`),
		},
		expr.Params: map[string]string{"region": "eu"},
		expr.Labels: map[string]string{"tenant": "acme"},
		expr.Run:    map[string]any{"id": "r1", "workflow": "orders", "version": int64(3)},
	}
}

func TestEval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		src  string
		want string
	}{
		{"input.n + 1", "3"},
		{"input.price * 2.0", "5"},
		{"deps.split.items", "[1,2,3]"},
		{"deps.split.items.map(x, x * 10)", "[10,20,30]"},
		{"{'tenant': input.tenant, 'region': params.region}", `{"region":"eu","tenant":"acme"}`},
		{"labels.tenant + '/' + run.workflow", `"acme/orders"`},
	} {
		p, err := expr.StepEnv.Compile(tc.src)
		require.NoError(t, err, tc.src)
		got, err := p.Eval(ctx, stepVars())
		require.NoError(t, err, tc.src)
		require.JSONEq(t, tc.want, string(got), tc.src)
	}
}

func TestEvalTyped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cond, err := expr.StepEnv.Compile("deps.split.count > 0 && input.tenant == 'acme'")
	require.NoError(t, err)
	ok, err := cond.EvalBool(ctx, stepVars())
	require.NoError(t, err)
	require.True(t, ok)

	until, err := expr.StepEnv.Compile("input.send_at")
	require.NoError(t, err)
	at, err := until.EvalTime(ctx, stepVars())
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), at.UTC())

	later, err := expr.StepEnv.Compile("timestamp(input.send_at) + duration('1h')")
	require.NoError(t, err)
	at, err = later.EvalTime(ctx, stepVars())
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC), at.UTC())

	key, err := expr.HookEnv.Compile("body.id")
	require.NoError(t, err)
	s, err := key.EvalString(ctx, expr.Vars{expr.Body: json.RawMessage(`{"id": 42}`), expr.Headers: map[string]string{}})
	require.NoError(t, err)
	require.Equal(t, "42", s)

	list, err := expr.StepEnv.Compile("deps.split.items")
	require.NoError(t, err)
	items, err := list.EvalList(ctx, stepVars())
	require.NoError(t, err)
	require.Len(t, items, 3)
	_, err = cond.EvalList(ctx, stepVars())
	require.ErrorContains(t, err, "want a list")
}

// TestCompileErrors: a bad expression is refused when compiled (at deploy), saying
// where and what names exist.
func TestCompileErrors(t *testing.T) {
	t.Parallel()
	for _, src := range []string{"", "input.", "nope.x", "body.id"} {
		_, err := expr.StepEnv.Compile(src)
		require.Error(t, err, src)
	}
	_, err := expr.StepEnv.Compile("nope.x")
	require.ErrorContains(t, err, "undeclared reference")
	require.ErrorContains(t, err, "names in scope: input, deps")
	_, err = expr.StepEnv.Compile(strings.Repeat("1+", 3000) + "1")
	require.ErrorContains(t, err, "at most")
}

// TestEvalErrors: a failing evaluation is an *expr.Error; reaching inside a $blob
// output names the step.
func TestEvalErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, err := expr.StepEnv.Compile("deps.big.rows > 3")
	require.NoError(t, err)
	_, err = p.EvalBool(ctx, stepVars())
	var e *expr.Error
	require.True(t, errors.As(err, &e), "%v", err)
	require.ErrorContains(t, err, "step big is in the blob store")

	p, err = expr.StepEnv.Compile("input.n")
	require.NoError(t, err)
	_, err = p.EvalBool(ctx, stepVars())
	require.ErrorContains(t, err, "want a bool, got int")

	p, err = expr.StepEnv.Compile("input.nothing")
	require.NoError(t, err)
	_, err = p.Eval(ctx, stepVars())
	require.ErrorContains(t, err, "no such key")
	require.NotContains(t, err.Error(), "blob")

	// A runaway comprehension is stopped by the cost limit.
	p, err = expr.StepEnv.Compile("[1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, [1,2,3,4,5,6,7,8,9,10].map(c, [1,2,3,4,5,6,7,8,9,10].map(d, [1,2,3,4,5,6,7,8,9,10].map(e, [1,2,3,4,5,6,7,8,9,10].map(f, [1,2,3,4,5,6,7,8,9,10].map(g, a+b+c+d+e+f+g)))))))")
	require.NoError(t, err)
	_, err = p.Eval(ctx, stepVars())
	require.ErrorContains(t, err, "cost")
}

// TestCompiledOnceUsedEverywhere: a source compiled again is the program compiled
// before (Compile keeps them), checked against its own Env's names only, and one
// program evaluates concurrently with each caller's values.
func TestCompiledOnceUsedEverywhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, err := expr.StepEnv.Compile("deps.split.count + input.n")
	require.NoError(t, err)
	again, err := expr.StepEnv.Compile("deps.split.count + input.n")
	require.NoError(t, err)
	require.Same(t, p, again)
	_, err = expr.CreateEnv.Compile("deps.split.count + input.n")
	require.ErrorContains(t, err, "undeclared reference", "no deps when a run is created")

	errs := make(chan error, 16)
	for i := range 16 {
		go func() {
			vars := stepVars()
			vars[expr.Input] = json.RawMessage(`{"n": ` + strconv.Itoa(i) + `}`)
			got, err := again.Eval(ctx, vars)
			if err == nil && string(got) != strconv.Itoa(3+i) {
				err = fmt.Errorf("input.n %d: got %s", i, got)
			}
			errs <- err
		}()
	}
	for range 16 {
		require.NoError(t, <-errs)
	}
}

// TestEvalBoundsValues: a value an expression builds is
// bounded by MaxValue (the API's input limit) while it is built. What it
// replays: `L.map(a, L.map(b, input.s))` over a 100 KB string gave a child run
// a 10 MB input, and four nested maps (a gigabyte of JSON) took the server to
// 4.5 GB. Each now fails with an expression error naming the limit; values under
// it still evaluate.
func TestEvalBoundsValues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const L = "[0,1,2,3,4,5,6,7,8,9]"
	vars := func(s string) expr.Vars {
		v := stepVars()
		v[expr.Input] = json.RawMessage(`{"s": "` + s + `", "n": 2}`)
		return v
	}
	s100k := strings.Repeat("A", 100_000)
	s600k := strings.Repeat("A", 600_000)
	limit := strconv.Itoa(expr.MaxValue)
	for _, tc := range []struct {
		name, src, s string
	}{
		{"two nested maps (X1)", L + ".map(a, " + L + ".map(b, input.s))", s100k},
		{"four nested maps (X2)", L + ".map(a, " + L + ".map(b, " + L + ".map(c, " + L + ".map(d, input.s))))", s100k},
		{"string concatenation", "input.s + input.s", s600k},
		{"doubling strings", "(input.s + input.s) + (input.s + input.s) + (input.s + input.s)", s100k + s100k},
		{"list literal", "[input.s, input.s]", s600k},
		{"map literal", "{'a': input.s, 'b': input.s}", s600k},
		{"list concatenation", "[input.s] + [input.s]", s600k},
		{"filter", L + ".filter(a, true).map(a, input.s)", s100k + s100k},
		{"absorbed by ||", L + ".exists(a, size(" + L + ".map(b, input.s + input.s)) == 0 || true)", s100k},
		{"a value not built over the limit", "input", s600k + s600k},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := expr.StepEnv.Compile(tc.src)
			require.NoError(t, err)
			out, err := p.Eval(ctx, vars(tc.s))
			var e *expr.Error
			require.True(t, errors.As(err, &e), "want an expression error, got %d bytes, %v", len(out), err)
			require.ErrorContains(t, err, "more than "+limit+" bytes")
		})
	}

	// Under the limit, the same expressions evaluate.
	p, err := expr.StepEnv.Compile(L + ".map(a, input.s)")
	require.NoError(t, err)
	out, err := p.Eval(ctx, vars(strings.Repeat("A", 100_000)))
	require.NoError(t, err)
	require.Greater(t, len(out), 1_000_000)
	p, err = expr.StepEnv.Compile("input.s + input.s")
	require.NoError(t, err)
	_, err = p.Eval(ctx, vars(strings.Repeat("A", 500_000)))
	require.NoError(t, err)
	items, err := expr.StepEnv.Compile(L + ".map(a, " + L + ".map(b, {'i': a * 10 + b, 'n': input.n}))")
	require.NoError(t, err)
	list, err := items.EvalList(ctx, vars("x"))
	require.NoError(t, err)
	require.Len(t, list, 10)
}
