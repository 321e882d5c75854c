package expr

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"strconv"

	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/parser"
)

// maxKey is the longest key kept as it is; a longer one is kept as its SHA-256.
const maxKey = 256

// Equality is a condition's test that one value read from a single name equals
// a value read without it: `event.data.order_id == input.order_id`, alone or as
// one of the terms joined by && (the first such term). A lookup by key can stand
// for it: when the condition holds, the two sides' keys (Key) are equal. So a
// store may record the key of the other side (OtherKey) where it waits, and find
// the candidates of a value of the name by its key (SideKey) instead of
// evaluating the condition against every one; it must still evaluate the
// condition on the candidates (two values may share a key and differ, a long
// key being its hash).
type Equality struct {
	// Side is the source of the side that reads only the name (as CEL writes it
	// back: event.data.order_id).
	Side  string
	side  *Program
	other *Program
}

// EqualityOf returns the equality of condition src over env whose one side
// reads only the variable name (and reads it), and whose other side does not
// read it; nil when src has none, or does not parse. The answer for a source
// asked before comes from env's cache.
func (env *Env) EqualityOf(src, name string) *Equality {
	if src == "" || len(src) > maxSource {
		return nil
	}
	ck := name + "\x00" + src
	if q, ok := env.equalities.Get(ck); ok {
		return q
	}
	q := env.equalityOf(src, name)
	env.equalities.Add(ck, q)
	return q
}

func (env *Env) equalityOf(src, name string) *Equality {
	parsed, iss := env.cel.Parse(src)
	if iss != nil && iss.Err() != nil {
		return nil
	}
	native := parsed.NativeRep()
	info := native.SourceInfo()
	var find func(e ast.Expr) *Equality
	find = func(e ast.Expr) *Equality {
		if e.Kind() != ast.CallKind {
			return nil
		}
		call := e.AsCall()
		args := call.Args()
		if len(args) != 2 {
			return nil
		}
		switch call.FunctionName() {
		case operators.LogicalAnd:
			if q := find(args[0]); q != nil {
				return q
			}
			return find(args[1])
		case operators.Equals:
			for _, pair := range [][2]ast.Expr{{args[0], args[1]}, {args[1], args[0]}} {
				side, other := names(pair[0]), names(pair[1])
				if len(side) != 1 || !side[name] || other[name] {
					continue
				}
				sideSrc, err := parser.Unparse(pair[0], info)
				if err != nil {
					return nil
				}
				otherSrc, err := parser.Unparse(pair[1], info)
				if err != nil {
					return nil
				}
				sp, err := env.Compile(sideSrc)
				if err != nil {
					return nil
				}
				op, err := env.Compile(otherSrc)
				if err != nil {
					return nil
				}
				return &Equality{Side: sideSrc, side: sp, other: op}
			}
		}
		return nil
	}
	return find(native.Expr())
}

// names returns the identifiers e reads (a comprehension's own variables among
// them, which keeps an expression that has one from being a side).
func names(e ast.Expr) map[string]bool {
	out := map[string]bool{}
	ast.PreOrderVisit(e, ast.NewExprVisitor(func(x ast.Expr) {
		switch x.Kind() {
		case ast.IdentKind:
			out[x.AsIdent()] = true
		case ast.ComprehensionKind:
			c := x.AsComprehension()
			out[c.IterVar()], out[c.AccuVar()] = true, true
		}
	}))
	return out
}

// SideKey evaluates the side that reads the name with vars and returns its key;
// false when the evaluation fails or its value is no string, number or bool
// (then no key stands for the condition: evaluate it).
func (q *Equality) SideKey(ctx context.Context, vars Vars) (string, bool) {
	return q.key(ctx, q.side, vars)
}

// OtherKey evaluates the other side with vars and returns its key, as SideKey.
func (q *Equality) OtherKey(ctx context.Context, vars Vars) (string, bool) {
	return q.key(ctx, q.other, vars)
}

func (q *Equality) key(ctx context.Context, p *Program, vars Vars) (string, bool) {
	v, err := p.eval(ctx, vars)
	if err != nil {
		return "", false
	}
	k, ok := valueKey(v)
	if !ok {
		return "", false
	}
	k = q.Side + "=" + k
	if len(k) > maxKey {
		sum := sha256.Sum256([]byte(k))
		k = "sha256:" + hex.EncodeToString(sum[:])
	}
	return k, true
}

// valueKey is a scalar's key: two values CEL finds equal (==) have the same
// key. Numbers are compared as CEL compares an int with a double, as doubles
// (two ints that differ beyond 2^53 share a key: the condition, evaluated on
// the candidates, tells them apart); a string, a bool and a number never share
// one.
func valueKey(v ref.Val) (string, bool) {
	var f float64
	switch x := v.(type) {
	case types.String:
		return strconv.Quote(string(x)), true
	case types.Bool:
		return strconv.FormatBool(bool(x)), true
	case types.Int:
		f = float64(x)
	case types.Uint:
		f = float64(x)
	case types.Double:
		f = float64(x)
	default:
		return "", false
	}
	if math.IsNaN(f) {
		return "", false // equal to nothing
	}
	if f == 0 {
		f = 0 // -0 == 0
	}
	return strconv.FormatFloat(f, 'g', -1, 64), true
}
