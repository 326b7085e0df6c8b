package contracts

import (
	"fmt"
	"reflect"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"

	"github.com/toolgate/toolgate/internal/jsontape"
)

// CEL values over a parsed backend answer. Objects and arrays stay views
// into the tape: selecting `body.results` costs a scan of the object's
// keys, and handing it to the data expression's output copies its raw
// bytes. Scalars become ordinary CEL values; integer literals that fit
// int64 are ints, other numbers doubles (rules compare them across types).
// A view lives as long as its tape: the Body is released only after every
// rule has run, and a view used later panics (see jsontape.Tape.Release).

func celValue(v jsontape.Value) ref.Val {
	switch v.Kind() {
	case jsontape.Null:
		return types.NullValue
	case jsontape.False:
		return types.False
	case jsontape.True:
		return types.True
	case jsontape.Number:
		if n, ok := v.Int(); ok {
			return types.Int(n)
		}
		f, err := v.Float()
		if err != nil {
			return types.NewErr("number %s out of range", v.Literal())
		}
		return types.Double(f)
	case jsontape.String:
		return types.String(v.Text())
	case jsontape.Array:
		return &celJSONList{jsonView: jsonView{v}}
	default:
		return &celJSONMap{jsonView: jsonView{v}}
	}
}

// jsonView is what an object and an array view share: the value they
// show, and the operations answered by cel-go's own value for it
// (equality, conversion, concatenation), which a view does not implement
// itself.
type jsonView struct {
	v jsontape.Value
}

// standard converts the view into cel-go's own value.
func (v jsonView) standard() ref.Val { return types.DefaultTypeAdapter.NativeToValue(v.v.Native()) }

func (v jsonView) ConvertToNative(t reflect.Type) (any, error) {
	return v.standard().ConvertToNative(t)
}
func (v jsonView) Equal(other ref.Val) ref.Val { return v.standard().Equal(other) }
func (v jsonView) Value() any                  { return v.v.Native() }
func (v jsonView) Size() ref.Val               { return types.Int(v.v.Len()) }

// celJSONMap is a JSON object as a CEL map.
type celJSONMap struct {
	jsonView
}

var (
	_ traits.Mapper = (*celJSONMap)(nil)
	_ traits.Lister = (*celJSONList)(nil)
)

// convertView is ConvertToType of a view of type own: to own it is
// itself, to a type it is own; nothing else.
func convertView(view ref.Val, own *types.Type, t ref.Type) ref.Val {
	switch t {
	case own:
		return view
	case types.TypeType:
		return own
	}
	return types.NewErr("type conversion error from %s to '%s'", own.TypeName(), t)
}

func (m *celJSONMap) ConvertToType(t ref.Type) ref.Val { return convertView(m, types.MapType, t) }

func (m *celJSONMap) Type() ref.Type { return types.MapType }

func (m *celJSONMap) Contains(key ref.Val) ref.Val {
	_, found := m.Find(key)
	return types.Bool(found)
}

func (m *celJSONMap) Get(key ref.Val) ref.Val {
	v, found := m.Find(key)
	if !found {
		if v != nil {
			return v
		}
		return types.NewErr("no such key: %v", key)
	}
	return v
}

func (m *celJSONMap) Find(key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		if types.IsUnknownOrError(key) {
			return key, false
		}
		return nil, false
	}
	at, found := m.v.Lookup(string(k))
	if !found {
		return nil, false
	}
	return celValue(at), true
}

func (m *celJSONMap) Iterator() traits.Iterator {
	return &celJSONIter{c: m.v.Cursor(), keys: true}
}

// celJSONIter iterates an object's keys or an array's elements.
type celJSONIter struct {
	c    jsontape.Cursor
	keys bool
}

func (it *celJSONIter) HasNext() ref.Val { return types.Bool(it.c.More()) }

func (it *celJSONIter) Next() ref.Val {
	if !it.c.More() {
		return nil
	}
	if it.keys {
		k, _ := it.c.Member()
		return types.String(k.Text())
	}
	return celValue(it.c.Element())
}

func (it *celJSONIter) ConvertToNative(reflect.Type) (any, error) {
	return nil, fmt.Errorf("type conversion on iterators not supported")
}
func (it *celJSONIter) ConvertToType(ref.Type) ref.Val { return types.NewErr("no such overload") }
func (it *celJSONIter) Equal(ref.Val) ref.Val          { return types.NewErr("no such overload") }
func (it *celJSONIter) Type() ref.Type                 { return types.IteratorType }
func (it *celJSONIter) Value() any                     { return nil }

// celJSONList is a JSON array as a CEL list.
type celJSONList struct {
	jsonView
	elems []jsontape.Value // found on first indexed access
}

func (l *celJSONList) index() []jsontape.Value {
	if l.elems == nil {
		l.elems = make([]jsontape.Value, 0, l.v.Len())
		for c := l.v.Cursor(); c.More(); {
			l.elems = append(l.elems, c.Element())
		}
	}
	return l.elems
}

func (l *celJSONList) ConvertToType(t ref.Type) ref.Val { return convertView(l, types.ListType, t) }

func (l *celJSONList) Type() ref.Type { return types.ListType }

func (l *celJSONList) Add(other ref.Val) ref.Val {
	return l.standard().(traits.Adder).Add(other)
}

func (l *celJSONList) Contains(v ref.Val) ref.Val {
	for _, e := range l.index() {
		if eq := celValue(e).Equal(v); eq == types.True {
			return types.True
		}
	}
	return types.False
}

func (l *celJSONList) Get(index ref.Val) ref.Val {
	var i int64
	switch t := index.(type) {
	case types.Int:
		i = int64(t)
	case types.Uint:
		i = int64(t)
	case types.Double:
		if float64(t) != float64(int64(t)) {
			return types.NewErr("unsupported index value %v in list", t)
		}
		i = int64(t)
	default:
		if types.IsUnknownOrError(index) {
			return index
		}
		return types.NewErr("unsupported index type '%s' in list", index.Type())
	}
	elems := l.index()
	if i < 0 || i >= int64(len(elems)) {
		return types.NewErr("index out of range: %d", i)
	}
	return celValue(elems[i])
}

// Fold walks the elements for a comprehension (map, filter, all, exists):
// CEL folds a list through it rather than through Size and Get. A walk
// that goes on past the first element most likely reads into every one:
// the records of a large answer, lazy in its tape, are then parsed in one
// go (jsontape.Value.Whole) rather than one tape per record. An exists
// that stops at the first pays for that one only.
func (l *celJSONList) Fold(f traits.Folder) {
	c := l.v.Cursor()
	for i := 0; c.More(); i++ {
		if i == 1 {
			c = l.v.Whole().Cursor()
			c.Element() // the first, folded already
		}
		if !f.FoldEntry(types.Int(i), celValue(c.Element())) {
			return
		}
	}
}

func (l *celJSONList) Iterator() traits.Iterator {
	return &celJSONIter{c: l.v.Cursor()}
}
