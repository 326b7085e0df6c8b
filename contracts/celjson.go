package contracts

import (
	"fmt"
	"reflect"
	"strconv"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// CEL values over a parsed backend answer. Objects and arrays stay views
// into the jsonDoc tape: selecting `body.results` costs a scan of the
// object's keys, and handing it to the data expression's output copies its
// raw bytes. Scalars become ordinary CEL values; integer literals that fit
// int64 are ints, other numbers doubles (rules compare them across types).

func (d *jsonDoc) celValue(i int32) ref.Val {
	n := &d.nodes[i]
	switch n.kind {
	case jsonNull:
		return types.NullValue
	case jsonFalse:
		return types.False
	case jsonTrue:
		return types.True
	case jsonNumber:
		raw := string(d.raw(i))
		if v, err := strconv.ParseInt(raw, 10, 64); err == nil {
			return types.Int(v)
		}
		f, err := strconv.ParseFloat(raw, 64)
		if err != nil {
			return types.NewErr("number %s out of range", raw)
		}
		return types.Double(f)
	case jsonString:
		return types.String(d.str(i))
	case jsonArray:
		return &celJSONList{jsonView: jsonView{d, i}}
	default:
		return &celJSONMap{jsonView: jsonView{d, i}}
	}
}

// standard converts a view into cel-go's own value, for the operations a
// view does not implement itself (equality, conversion, concatenation).
func standard(d *jsonDoc, i int32) ref.Val {
	return types.DefaultTypeAdapter.NativeToValue(d.native(i))
}

// jsonView is what an object and an array view share: the node they show,
// and the operations answered by cel-go's own value for it.
type jsonView struct {
	d *jsonDoc
	i int32
}

func (v jsonView) ConvertToNative(t reflect.Type) (any, error) {
	return standard(v.d, v.i).ConvertToNative(t)
}
func (v jsonView) Equal(other ref.Val) ref.Val { return standard(v.d, v.i).Equal(other) }
func (v jsonView) Value() any                  { return v.d.native(v.i) }
func (v jsonView) Size() ref.Val               { return types.Int(v.d.nodes[v.i].count) }

// celJSONMap is a JSON object as a CEL map.
type celJSONMap struct {
	jsonView
}

var (
	_ traits.Mapper = (*celJSONMap)(nil)
	_ traits.Lister = (*celJSONList)(nil)
)

func (m *celJSONMap) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.MapType:
		return m
	case types.TypeType:
		return types.MapType
	}
	return types.NewErr("type conversion error from map to '%s'", t)
}

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
	at, found := m.d.member(m.i, string(k))
	if !found {
		return nil, false
	}
	return m.d.celValue(at), true
}

func (m *celJSONMap) Iterator() traits.Iterator {
	return &celJSONIter{d: m.d, next: m.i + 1, left: m.d.nodes[m.i].count, keys: true}
}

// celJSONIter iterates an object's keys or an array's elements.
type celJSONIter struct {
	d    *jsonDoc
	next int32 // the node of the next key or element
	left int32
	keys bool
}

func (it *celJSONIter) HasNext() ref.Val { return types.Bool(it.left > 0) }

func (it *celJSONIter) Next() ref.Val {
	if it.left <= 0 {
		return nil
	}
	n := it.next
	it.left--
	if it.keys {
		it.next = it.d.nodes[n+1].next // skip the member's value
		return types.String(it.d.str(n))
	}
	it.next = it.d.nodes[n].next
	return it.d.celValue(n)
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
	elems []int32 // node indices, found on first indexed access
}

func (l *celJSONList) index() []int32 {
	if l.elems == nil {
		l.elems = l.d.elements(l.i)
	}
	return l.elems
}

func (l *celJSONList) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.ListType:
		return l
	case types.TypeType:
		return types.ListType
	}
	return types.NewErr("type conversion error from list to '%s'", t)
}

func (l *celJSONList) Type() ref.Type { return types.ListType }

func (l *celJSONList) Add(other ref.Val) ref.Val {
	return standard(l.d, l.i).(traits.Adder).Add(other)
}

func (l *celJSONList) Contains(v ref.Val) ref.Val {
	for _, e := range l.index() {
		if eq := l.d.celValue(e).Equal(v); eq == types.True {
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
	return l.d.celValue(elems[i])
}

func (l *celJSONList) Iterator() traits.Iterator {
	return &celJSONIter{d: l.d, next: l.i + 1, left: l.d.nodes[l.i].count}
}
