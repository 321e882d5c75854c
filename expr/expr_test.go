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
