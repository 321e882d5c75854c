package expr

import (
	"fmt"
	"reflect"
	"strconv"

	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
)

// MaxValue bounds the size of every value an expression builds, and of its
// result, in bytes of JSON: 1 MiB, the limit of a run's input in the API (a child
// run's input, a hook's input and a map's items are built by expressions). CEL's
// cost limit counts operations, not the size of the values they copy or repeat:
// `L.map(a, L.map(b, input.s))` over a 100 KB string is a hundred operations and
// 10 MB of JSON, and four such maps are a gigabyte. So the values are measured
// while they are built (sizeMeter), and an evaluation stops at the first one over
// the limit, before it grows further or is turned into JSON.
const MaxValue = 1 << 20

// meterVar is the name under which an evaluation's sizeMeter is found in its
// activation. It is not a CEL identifier: no expression can name it.
const meterVar = "@cairn.meter"

// sizeMeter measures the values one evaluation builds. Sizes are those of the
// values' JSON, counted closely enough to bound them (a string's bytes and its
// quotes, not its escapes): toJSON checks the exact size of the result.
type sizeMeter struct {
	limit int
	// visits counts the elements measured, bounded like CEL's cost: measuring is
	// work the expression makes the server do.
	visits int
	// sizes are the lists and maps measured so far, by identity; a mutable list
	// (a comprehension's accumulator, which grows in place) with the number of
	// elements measured, so that each append measures only what it adds.
	sizes map[any]measured
	// over is the first error: an evaluation whose value went past a limit fails,
	// even where CEL would absorb the error (`big + big == "" || true`).
	over error
}

type measured struct {
	size, elems int
}

func newSizeMeter(limit int) *sizeMeter {
	return &sizeMeter{limit: limit, sizes: make(map[any]measured)}
}

// errTooBig is the error of a value over the limit.
type errTooBig struct{ limit int }

func (e errTooBig) Error() string {
	return fmt.Sprintf("it builds a value of more than %d bytes (the limit of a value an expression builds, as of a run's input)", e.limit)
}

// errTooMuchWork is the error of an evaluation that made the meter visit more
// elements than CEL's cost limit allows operations.
type errTooMuchWork struct{ limit int }

func (e errTooMuchWork) Error() string {
	return fmt.Sprintf("it visits more than %d elements of the values it builds (the cost limit)", e.limit)
}

// check measures v and returns an error value when it is over the limit.
func (m *sizeMeter) check(v ref.Val) ref.Val {
	if m.over != nil {
		return types.WrapErr(m.over)
	}
	if types.IsUnknownOrError(v) {
		return v
	}
	m.size(v)
	if m.over != nil {
		return types.WrapErr(m.over)
	}
	return v
}

// size returns v's size, at most limit+1 (past the limit it stops counting and
// sets over).
func (m *sizeMeter) size(v ref.Val) int {
	if m.over != nil {
		return m.limit + 1
	}
	m.visits++
	if m.visits > costLimit {
		m.over = errTooMuchWork{limit: costLimit}
		return m.limit + 1
	}
	var n int
	switch x := v.(type) {
	case types.String:
		n = len(x) + 2
	case types.Bytes:
		n = (len(x)+2)/3*4 + 2 // base64
	case types.Int:
		n = len(strconv.FormatInt(int64(x), 10))
	case types.Uint:
		n = len(strconv.FormatUint(uint64(x), 10))
	case types.Bool, types.Double, types.Null:
		n = 5
	case *types.Optional:
		if x.HasValue() {
			return m.size(x.GetValue())
		}
		n = 4
	case traits.Lister:
		n = m.listSize(x)
	case traits.Mapper:
		n = m.mapSize(x)
	default:
		n = 32 // timestamps, durations, types: a short string
	}
	if n > m.limit {
		m.over = errTooBig{limit: m.limit}
		return m.limit + 1
	}
	return n
}

func (m *sizeMeter) listSize(l traits.Lister) int {
	key, keyed := identity(l)
	_, mutable := l.(traits.MutableLister)
	count := int(l.Size().(types.Int))
	prev := measured{size: 2}
	if keyed {
		if p, ok := m.sizes[key]; ok {
			if !mutable || p.elems == count {
				return p.size
			}
			if p.elems < count {
				prev = p
			}
		}
	}
	n := prev.size
	for i := prev.elems; i < count; i++ {
		n += m.size(l.Get(types.Int(i))) + 1
		if n > m.limit {
			return n
		}
	}
	if keyed {
		m.sizes[key] = measured{size: n, elems: count}
	}
	return n
}

func (m *sizeMeter) mapSize(mp traits.Mapper) int {
	key, keyed := identity(mp)
	if keyed {
		if p, ok := m.sizes[key]; ok && p.elems == int(mp.Size().(types.Int)) {
			return p.size
		}
	}
	n := 2
	for it := mp.Iterator(); it.HasNext() == types.True; {
		k := it.Next()
		n += m.size(k) + 1 + m.size(mp.Get(k)) + 1
		if n > m.limit {
			return n
		}
	}
	if keyed {
		m.sizes[key] = measured{size: n, elems: int(mp.Size().(types.Int))}
	}
	return n
}

// identity is v as a map key when it is a pointer (the lists and maps of CEL's
// types package are), so that a value measured once is not measured again.
func identity(v ref.Val) (any, bool) {
	if reflect.ValueOf(v).Kind() != reflect.Pointer {
		return nil, false
	}
	return v, true
}

// meterOf finds the evaluation's meter in its activation.
func meterOf(vars interpreter.Activation) *sizeMeter {
	v, ok := vars.ResolveName(meterVar)
	if !ok {
		return nil
	}
	m, _ := v.(*sizeMeter)
	return m
}

// builds reports whether a call's overload makes a value larger than its
// arguments: the concatenations.
func builds(overload string) bool {
	switch overload {
	case overloads.AddList, overloads.AddString, overloads.AddBytes:
		return true
	}
	return false
}

// decorateSizes wraps the program steps that build values (concatenations:
// a comprehension such as map or filter appends to its result with add_list) so
// that each value they build is measured by the evaluation's meter, and one over
// the limit ends the evaluation with an error. The wrapper keeps the interface of
// what it wraps: CEL's cost tracker looks at a call's arguments. List and map
// literals are not wrapped: they hold references to their elements (no copy),
// their size is measured where they become part of a value built (an append) and
// in the result.
func decorateSizes(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
	if c, ok := i.(interpreter.InterpretableCall); ok && builds(c.OverloadID()) {
		return &meteredCall{InterpretableCall: c}, nil
	}
	return i, nil
}

type meteredCall struct {
	interpreter.InterpretableCall
}

func (c *meteredCall) Exec(frame *interpreter.ExecutionFrame) ref.Val {
	v := c.InterpretableCall.Exec(frame)
	if m := meterOf(frame); m != nil {
		return m.check(v)
	}
	return v
}

func (c *meteredCall) Eval(vars interpreter.Activation) ref.Val {
	return c.Exec(interpreter.AsFrame(vars))
}
