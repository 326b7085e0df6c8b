package contracts

import (
	"strconv"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"

	"github.com/toolgate/toolgate/internal/jsontape"
)

// The direct evaluator answers the common rule shapes without the CEL
// interpreter: fields of the body (body.a.b), has(), size(), comparisons of
// integers and strings, !, && and ||, and a data map literal of such
// fields. It is an accelerator, not a second CEL: it answers only when it
// is certain of what CEL would answer, and hands everything else (a missing
// member, a value of another type, any error CEL would raise) to the
// compiled program. FuzzDirectRules compares the two.
//
// It needs neither the cost limit nor the call's deadline, because it is
// bounded by construction: it has no loops, evaluates each node of the
// expression at most once, and each node does work linear in the part of
// the body it reads (a member lookup scans one object's keys, a comparison
// reads two scalars, a data member copies one value). One evaluation costs
// at most the body's size times the expression's.

// dkind is the kind of a directly evaluated value.
type dkind uint8

const (
	dNode   dkind = iota + 1 // a node of the body
	dInt                     // an int
	dString                  // a string
	dBool                    // a bool
)

type dval struct {
	kind dkind
	node jsontape.Value
	i    int64
	s    string
	b    bool
}

// directExpr evaluates an expression; ok=false means "ask CEL".
type directExpr func(a *activation) (v dval, ok bool)

// compileDirect returns the direct evaluation of e, or nil when e has a
// shape the direct evaluator does not take.
func compileDirect(e celast.Expr) directExpr {
	switch e.Kind() {
	case celast.IdentKind:
		switch e.AsIdent() {
		case "status":
			return func(a *activation) (dval, bool) { return dval{kind: dInt, i: int64(a.in.Status)}, true }
		case "body":
			return func(a *activation) (dval, bool) {
				if a.in.Body == nil {
					return dval{}, false // CEL's null
				}
				return dval{kind: dNode, node: a.in.Body.tape.Root()}, true
			}
		}
	case celast.LiteralKind:
		switch v := e.AsLiteral().(type) {
		case types.Int:
			return func(*activation) (dval, bool) { return dval{kind: dInt, i: int64(v)}, true }
		case types.String:
			return func(*activation) (dval, bool) { return dval{kind: dString, s: string(v)}, true }
		case types.Bool:
			return func(*activation) (dval, bool) { return dval{kind: dBool, b: bool(v)}, true }
		}
	case celast.SelectKind:
		return compileSelect(e.AsSelect())
	case celast.CallKind:
		return compileCall(e.AsCall())
	}
	return nil
}

// compileSelect is a member of an object node, or has() of one.
func compileSelect(sel celast.SelectExpr) directExpr {
	operand := compileDirect(sel.Operand())
	if operand == nil {
		return nil
	}
	field, test := sel.FieldName(), sel.IsTestOnly()
	return func(a *activation) (dval, bool) {
		v, ok := operand(a)
		if !ok || v.kind != dNode {
			return dval{}, false
		}
		if v.node.Kind() != jsontape.Object {
			return dval{}, false // CEL raises an error here
		}
		at, found := v.node.Lookup(field)
		if test {
			return dval{kind: dBool, b: found}, true
		}
		if !found {
			return dval{}, false // no such key
		}
		return dval{kind: dNode, node: at}, true
	}
}

func compileCall(call celast.CallExpr) directExpr {
	args := call.Args()
	fn := call.FunctionName()
	if call.IsMemberFunction() {
		if fn != overloads.Size || len(args) != 0 {
			return nil
		}
		args = []celast.Expr{call.Target()}
	}
	compiled := make([]directExpr, len(args))
	for i, arg := range args {
		if compiled[i] = compileDirect(arg); compiled[i] == nil {
			return nil
		}
	}
	switch {
	case fn == overloads.Size && len(compiled) == 1:
		x := compiled[0]
		return func(a *activation) (dval, bool) {
			v, ok := x(a)
			if !ok || v.kind != dNode {
				return dval{}, false
			}
			if k := v.node.Kind(); k != jsontape.Array && k != jsontape.Object {
				return dval{}, false // strings count code points: CEL does it
			}
			return dval{kind: dInt, i: int64(v.node.Len())}, true
		}
	case fn == operators.LogicalNot && len(compiled) == 1:
		x := compiled[0]
		return func(a *activation) (dval, bool) {
			v, ok := x(a)
			if !ok || v.kind != dBool {
				return dval{}, false
			}
			return dval{kind: dBool, b: !v.b}, true
		}
	case (fn == operators.LogicalAnd || fn == operators.LogicalOr) && len(compiled) == 2:
		// CEL's && and || are commutative: one side that decides (false
		// for &&, true for ||) decides, whatever the other side is, an
		// error included.
		decides := fn == operators.LogicalOr
		l, r := compiled[0], compiled[1]
		return func(a *activation) (dval, bool) {
			lv, lok := l(a)
			lok = lok && lv.kind == dBool
			if lok && lv.b == decides {
				return lv, true
			}
			rv, rok := r(a)
			rok = rok && rv.kind == dBool
			if rok && rv.b == decides {
				return rv, true
			}
			if lok && rok {
				return dval{kind: dBool, b: !decides}, true
			}
			return dval{}, false
		}
	case len(compiled) == 2:
		cmp := comparison(fn)
		if cmp == nil {
			return nil
		}
		l, r := compiled[0], compiled[1]
		return func(a *activation) (dval, bool) {
			lv, lok := l(a)
			if !lok {
				return dval{}, false
			}
			rv, rok := r(a)
			if !rok {
				return dval{}, false
			}
			return cmp(scalar(lv), scalar(rv))
		}
	}
	return nil
}

// scalar turns a node into the int or string CEL would read from it; any
// other node stays a node, which no comparison takes.
func scalar(v dval) dval {
	if v.kind != dNode {
		return v
	}
	switch v.node.Kind() {
	case jsontape.String:
		return dval{kind: dString, s: v.node.Text()}
	case jsontape.Number:
		// celValue reads a number as an int when it is written as one.
		if i, ok := v.node.Int(); ok {
			return dval{kind: dInt, i: i}
		}
	}
	return v
}

// comparison is an operator over two ints or two strings; nil for other
// functions. Other pairs of kinds are CEL's to compare.
func comparison(fn string) func(l, r dval) (dval, bool) {
	var intOp func(l, r int64) bool
	var strOp func(l, r string) bool
	switch fn {
	case operators.Equals:
		intOp, strOp = func(l, r int64) bool { return l == r }, func(l, r string) bool { return l == r }
	case operators.NotEquals:
		intOp, strOp = func(l, r int64) bool { return l != r }, func(l, r string) bool { return l != r }
	case operators.Less:
		intOp = func(l, r int64) bool { return l < r }
	case operators.LessEquals:
		intOp = func(l, r int64) bool { return l <= r }
	case operators.Greater:
		intOp = func(l, r int64) bool { return l > r }
	case operators.GreaterEquals:
		intOp = func(l, r int64) bool { return l >= r }
	default:
		return nil
	}
	return func(l, r dval) (dval, bool) {
		switch {
		case l.kind == dInt && r.kind == dInt:
			return dval{kind: dBool, b: intOp(l.i, r.i)}, true
		case l.kind == dString && r.kind == dString && strOp != nil:
			return dval{kind: dBool, b: strOp(l.s, r.s)}, true
		}
		return dval{}, false
	}
}

// directEntry is one entry of a data map literal.
type directEntry struct {
	key   string
	value directExpr
}

// compileDirectMap returns the entries of a data expression that is a map
// literal of string keys, each once, whose values the direct evaluator
// takes; nil otherwise.
func compileDirectMap(ast *cel.Ast) []directEntry {
	e := ast.NativeRep().Expr()
	if e.Kind() != celast.MapKind {
		return nil
	}
	var out []directEntry
	seen := map[string]bool{}
	for _, entry := range e.AsMap().Entries() {
		me := entry.AsMapEntry()
		if me.IsOptional() || me.Key().Kind() != celast.LiteralKind {
			return nil
		}
		k, ok := me.Key().AsLiteral().(types.String)
		if !ok || seen[string(k)] {
			return nil
		}
		seen[string(k)] = true
		v := compileDirect(me.Value())
		if v == nil {
			return nil
		}
		out = append(out, directEntry{key: string(k), value: v})
	}
	return out
}

// appendDirectMap writes the data map as appendOrderedMap writes CEL's,
// with its members; ok=false asks CEL.
func appendDirectMap(dst []byte, entries []directEntry, a *activation) ([]byte, []Member, bool) {
	base := len(dst)
	vals := make([]dval, len(entries))
	for i, e := range entries {
		v, ok := e.value(a)
		if !ok {
			return dst, nil, false
		}
		vals[i] = v
	}
	members := make([]Member, 0, len(entries))
	dst = append(dst, '{')
	for i, e := range entries {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsontape.AppendString(dst, e.key)
		dst = append(dst, ':')
		start := len(dst)
		var err error
		switch v := vals[i]; v.kind {
		case dNode:
			dst, err = appendCEL(dst, celValue(v.node), nil, 1)
		case dInt:
			dst = strconv.AppendInt(dst, v.i, 10)
		case dString:
			dst = jsontape.AppendString(dst, v.s)
		case dBool:
			dst = strconv.AppendBool(dst, v.b)
		}
		if err != nil {
			return dst[:base], nil, false
		}
		m := Member{Key: e.key, Start: start, End: len(dst)}
		if v := vals[i]; v.kind == dNode && v.node.Kind() == jsontape.Array {
			m.Elements = v.node.Len()
		}
		members = append(members, m)
	}
	return append(dst, '}'), members, true
}
