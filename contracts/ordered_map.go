package contracts

import (
	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"
)

// CEL maps have no order, so a map literal written in response.data
// ({"id": i.id, "title": i.title}) would come out with sorted keys. The
// data program marks every map literal whose keys are constant strings:
// its value is an orderedMap, which is the map CEL built and the keys in
// the order written, and appendCEL writes it in that order, at any depth
// (in a list, in a map(), in another literal).

// orderedMap is a map built from a literal, with its keys in the order
// written. It is the CEL map in every other respect.
type orderedMap struct {
	traits.Mapper
	order []string
}

// mapLiteralOrders returns the key order of every map literal of e whose
// keys are all constant strings, by expression id.
//
// A literal that is only read from ({"a": 1, "b": 2}[k]) is left as it is:
// its value is never written, and the interpreter reads it as an
// attribute, which an orderedMap is not.
func mapLiteralOrders(e celast.Expr) map[int64][]string {
	orders := map[int64][]string{}
	read := map[int64]bool{}
	celast.PreOrderVisit(e, celast.NewExprVisitor(func(e celast.Expr) {
		switch e.Kind() {
		case celast.SelectKind:
			read[e.AsSelect().Operand().ID()] = true
		case celast.CallKind:
			if c := e.AsCall(); (c.FunctionName() == operators.Index || c.FunctionName() == operators.OptIndex) && len(c.Args()) > 0 {
				read[c.Args()[0].ID()] = true
			}
		}
		if e.Kind() != celast.MapKind || read[e.ID()] {
			return
		}
		var keys []string
		for _, entry := range e.AsMap().Entries() {
			k := entry.AsMapEntry().Key()
			if k.Kind() != celast.LiteralKind {
				return
			}
			s, ok := k.AsLiteral().(types.String)
			if !ok {
				return
			}
			keys = append(keys, string(s))
		}
		if len(keys) > 1 {
			orders[e.ID()] = keys
		}
	}))
	return orders
}

// keepMapLiteralOrder is the program option that makes the map literals of
// orders evaluate to orderedMaps; nil when there are none.
func keepMapLiteralOrder(orders map[int64][]string) cel.ProgramOption {
	if len(orders) == 0 {
		return nil
	}
	return cel.CustomDecoratorV2(func(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
		if order, ok := orders[i.ID()]; ok {
			return &orderedLiteral{InterpretableV2: i, order: order}, nil
		}
		return i, nil
	})
}

// orderedLiteral evaluates a map literal to an orderedMap.
type orderedLiteral struct {
	interpreter.InterpretableV2
	order []string
}

func (o *orderedLiteral) Exec(frame *interpreter.ExecutionFrame) ref.Val {
	return o.ordered(o.InterpretableV2.Exec(frame))
}

func (o *orderedLiteral) Eval(act interpreter.Activation) ref.Val {
	return o.ordered(o.InterpretableV2.Eval(act))
}

func (o *orderedLiteral) ordered(v ref.Val) ref.Val {
	if m, ok := v.(traits.Mapper); ok {
		if n, ok := m.Size().(types.Int); ok && int(n) == len(o.order) {
			return &orderedMap{Mapper: m, order: o.order}
		}
	}
	return v
}
