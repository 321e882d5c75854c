package expr_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/expr"
)

func TestEqualityOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src, side string // side "": no equality
	}{
		{"event field", "event.data.order_id == input.order_id", "event.data.order_id"},
		{"reversed", "input.order_id == event.data.order_id", "event.data.order_id"},
		{"index", `event.data["order-id"] == input.id`, `event.data["order-id"]`},
		{"constant", `event.data.kind == "paid"`, "event.data.kind"},
		{"first term of &&", "event.data.amount > 0 && event.data.order_id == input.order_id && input.x", "event.data.order_id"},
		{"computed other side", `event.data.ref == input.prefix + "-" + string(input.n)`, "event.data.ref"},
		{"computed event side", "size(event.data.ref) == input.n", "size(event.data.ref)"},
		{"both sides read event", "event.data.a == event.data.b", ""},
		{"side reads input too", "event.data.a + input.b == 3", ""},
		{"or", "event.data.order_id == input.order_id || input.any", ""},
		{"not equal", "event.data.order_id != input.order_id", ""},
		{"comprehension", "event.data.ids.exists(x, x == input.id)", ""},
		{"no match", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := expr.EventEnv.EqualityOf(tc.src, expr.Event)
			if tc.side == "" {
				require.Nil(t, q)
				return
			}
			require.NotNil(t, q)
			require.Equal(t, tc.side, q.Side)
		})
	}
}

// TestEqualityKeysAgreeWithCEL: for every pair of values, the keys of the two
// sides are equal when CEL finds the condition true (or a value has no key: the
// condition must then be evaluated), so that a lookup by key finds every wait
// whose match holds; and different unless two numbers are equal as doubles.
func TestEqualityKeysAgreeWithCEL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const src = "event.data.v == input.v"
	q := expr.EventEnv.EqualityOf(src, expr.Event)
	require.NotNil(t, q)
	prg, err := expr.EventEnv.Compile(src)
	require.NoError(t, err)
	values := []string{`"o-17"`, `"17"`, `"O-17"`, `""`, `"a\"b"`, `17`, `17.0`, `17.5`, `-0.0`, `0`, `1e2`, `100`,
		`9007199254740993`, `9007199254740992`, `9007199254740992.0`, `1152921504606846976`, `1.152921504606847e18`,
		`true`, `false`, `"true"`, `1`, `null`, `[1]`, `{"a": 1}`, `1e300`}
	for _, a := range values {
		for _, b := range values {
			ev := json.RawMessage(fmt.Sprintf(`{"id": "e", "name": "n", "data": {"v": %s}, "received_at": "2026-12-06T00:00:00Z"}`, a))
			in := json.RawMessage(fmt.Sprintf(`{"v": %s}`, b))
			holds, err := prg.EvalBool(ctx, expr.Vars{expr.Event: ev, expr.Input: in})
			sk, sok := q.SideKey(ctx, expr.Vars{expr.Event: ev, expr.Input: nil})
			ok, ook := q.OtherKey(ctx, expr.Vars{expr.Event: nil, expr.Input: in})
			if !sok || !ook {
				continue // no key: the condition is evaluated
			}
			require.NoError(t, err, "%s vs %s", a, b)
			if holds {
				require.Equal(t, sk, ok, "%s vs %s: CEL finds them equal", a, b)
			} else if sk == ok {
				require.Contains(t, []string{a, b}, "9007199254740993", "%s vs %s: CEL finds them different, with the key %s", a, b, sk)
			}
		}
	}
	// The keys name the side they come from: another field's equal value is
	// another key.
	other := expr.EventEnv.EqualityOf("event.data.w == input.v", expr.Event)
	in := expr.Vars{expr.Input: json.RawMessage(`{"v": 1}`)}
	k1, _ := q.OtherKey(ctx, in)
	k2, _ := other.OtherKey(ctx, in)
	require.NotEqual(t, k1, k2)
	require.Equal(t, `event.data.v=1`, k1)
}
