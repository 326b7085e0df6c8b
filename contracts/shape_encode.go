package contracts

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// shaper evaluates a binding's shapes for one call. The CEL activation is
// made on the first expression, once per call.
type shaper struct {
	args map[string]any
	act  map[string]any
}

// value is a leaf's value; ok is false when the leaf is left out: an
// absent argument, or an expression that reads one.
func (sh *shaper) value(n *node) (any, bool, error) {
	switch n.kind {
	case ShapeArg:
		v, ok := sh.args[n.arg]
		return v, ok, nil
	case ShapeConst:
		return n.value, true, nil
	case ShapeExpr:
		return sh.eval(n.expr)
	}
	return nil, false, fmt.Errorf("shape of kind %d is not a leaf", n.kind)
}

// eval runs an expression under the cost limit. One that fails only
// because an argument it reads is absent (or a member of one) is left out,
// as an absent argument is. Any other failure is the arguments' fault (the
// expression compiled against the schema): bad_args naming the first
// argument it reads.
func (sh *shaper) eval(x *shapeExpr) (any, bool, error) {
	if sh.act == nil {
		args := sh.args
		if args == nil {
			args = map[string]any{}
		}
		sh.act = map[string]any{"args": normalizeNumbers(args)}
	}
	out, _, err := x.prg.Eval(sh.act)
	if err != nil {
		if missingKey(err) {
			return nil, false, nil
		}
		return nil, false, &ArgError{Pointer: x.pointer, Problem: ProblemInvalid, Detail: cannotBuild}
	}
	v, err := celNative(out, 0)
	if err != nil {
		return nil, false, &ArgError{Pointer: x.pointer, Problem: ProblemInvalid, Detail: cannotBuild}
	}
	if x.noMap {
		if _, isMap := v.(map[string]any); isMap {
			return nil, false, &ArgError{Pointer: x.pointer, Problem: ProblemScalar}
		}
	}
	return v, true, nil
}

// cannotBuild is the detail of an argument the request cannot be built
// from: an expression over it failed.
const cannotBuild = "the backend request cannot be built from it"

// missingKey reports whether an evaluation error says only that a key is
// absent (CEL's message, as absentPath reads it for the response rules).
func missingKey(err error) bool {
	var e *types.Err
	return errors.As(err, &e) && strings.HasPrefix(e.Error(), "no such key: ")
}

// celNative turns an expression's result into the JSON-like values
// arguments are: map[string]any, []any, string, json.Number, bool, nil.
// Integral doubles are spelled as integers; NaN and the infinities, which
// JSON cannot carry, are an error.
func celNative(v ref.Val, depth int) (any, error) {
	if depth > maxCELDepth {
		return nil, errors.New("value nested too deep")
	}
	switch t := v.(type) {
	case types.Null:
		return nil, nil
	case types.Bool:
		return bool(t), nil
	case types.Int:
		return json.Number(strconv.FormatInt(int64(t), 10)), nil
	case types.Uint:
		return json.Number(strconv.FormatUint(uint64(t), 10)), nil
	case types.Double:
		s, ok := formatFloat(float64(t))
		if !ok {
			return nil, fmt.Errorf("%v is not a JSON number", float64(t))
		}
		return json.Number(s), nil
	case types.String:
		return string(t), nil
	case types.Bytes:
		return base64.StdEncoding.EncodeToString([]byte(t)), nil
	case types.Timestamp:
		return t.Time.UTC().Format(time.RFC3339Nano), nil
	case types.Duration:
		return t.Duration.String(), nil
	}
	if types.IsError(v) || types.IsUnknown(v) {
		return nil, fmt.Errorf("%v", v)
	}
	if m, ok := v.(traits.Mapper); ok {
		out := map[string]any{}
		it := m.Iterator()
		for it.HasNext() == types.True {
			k := it.Next()
			s, ok := k.(types.String)
			if !ok {
				return nil, fmt.Errorf("map key %v is not a string", k)
			}
			e, err := celNative(m.Get(k), depth+1)
			if err != nil {
				return nil, err
			}
			out[string(s)] = e
		}
		return out, nil
	}
	if l, ok := v.(traits.Lister); ok {
		n, _ := l.Size().(types.Int)
		out := make([]any, 0, int(n))
		for i := types.Int(0); i < n; i++ {
			e, err := celNative(l.Get(i), depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	}
	return nil, fmt.Errorf("cannot represent %s as JSON", v.Type().TypeName())
}

// appendJSON appends a JSON body node. ok is false when the node is left
// out: a leaf with no value, or a written object or list whose members
// were all left out (one written empty is sent as written).
func (sh *shaper) appendJSON(dst []byte, n *node) ([]byte, bool, error) {
	switch n.kind {
	case ShapeConst:
		return append(dst, n.raw...), true, nil
	case ShapeObject:
		start := len(dst)
		dst = append(dst, '{')
		count := 0
		for i := range n.members {
			m := &n.members[i]
			mark := len(dst)
			if count > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, m.key...)
			var ok bool
			var err error
			if dst, ok, err = sh.appendJSON(dst, m.node); err != nil {
				return dst, false, err
			}
			if !ok {
				dst = dst[:mark]
				continue
			}
			count++
		}
		if count == 0 && len(n.members) > 0 {
			return dst[:start], false, nil
		}
		return append(dst, '}'), true, nil
	case ShapeList:
		start := len(dst)
		dst = append(dst, '[')
		count := 0
		for _, item := range n.items {
			mark := len(dst)
			if count > 0 {
				dst = append(dst, ',')
			}
			var ok bool
			var err error
			if dst, ok, err = sh.appendJSON(dst, item); err != nil {
				return dst, false, err
			}
			if !ok {
				dst = dst[:mark]
				continue
			}
			count++
		}
		if count == 0 && len(n.items) > 0 {
			return dst[:start], false, nil
		}
		return append(dst, ']'), true, nil
	}
	v, ok, err := sh.value(n)
	if err != nil || !ok {
		return dst, false, err
	}
	out, err := appendJSONValue(dst, v)
	if err != nil {
		return dst, false, &ArgError{Pointer: n.pointer(), Problem: ProblemInvalid}
	}
	return out, true, nil
}

// pointer names the argument a leaf reads, for an error about its value.
func (n *node) pointer() string {
	switch n.kind {
	case ShapeArg:
		return "/" + escapePointer(n.arg)
	case ShapeExpr:
		return n.expr.pointer
	}
	return ""
}

// appendForm appends a query or form body's pairs, escaped as
// application/x-www-form-urlencoded.
func (sh *shaper) appendForm(dst []byte, f *formShape) ([]byte, error) {
	if f.whole != nil {
		v, ok, err := sh.value(f.whole)
		if err != nil || !ok || v == nil {
			return dst, err
		}
		obj, isObj := v.(map[string]any)
		if !isObj {
			return dst, &ArgError{Pointer: f.whole.pointer(), Problem: ProblemType, Values: []string{"object"}}
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			esc := append(appendQueryEscaped(make([]byte, 0, len(k)+1), k), '=')
			if dst, err = appendFormValue(dst, esc, obj[k]); err != nil {
				return dst, &ArgError{Pointer: f.whole.pointer(), Problem: ProblemInvalid}
			}
		}
		return dst, nil
	}
	for i := range f.fields {
		fd := &f.fields[i]
		v, ok, err := sh.value(fd.leaf)
		if err != nil {
			return dst, err
		}
		if !ok {
			continue
		}
		if dst, err = appendFormValue(dst, fd.esc, v); err != nil {
			return dst, &ArgError{Pointer: fd.leaf.pointer(), Problem: ProblemInvalid}
		}
	}
	return dst, nil
}

// appendFormValue appends the pairs of one value at one key (esc is the
// escaped key and '='): null sends nothing, a scalar one pair, a list one
// pair per item (its nulls left out), and an object, or a list inside a
// list, one pair whose value is its compact JSON.
func appendFormValue(dst, esc []byte, v any) ([]byte, error) {
	if list, ok := v.([]any); ok {
		for _, item := range list {
			var err error
			if dst, err = appendFormPair(dst, esc, item); err != nil {
				return dst, err
			}
		}
		return dst, nil
	}
	return appendFormPair(dst, esc, v)
}

func appendFormPair(dst, esc []byte, v any) ([]byte, error) {
	if v == nil {
		return dst, nil
	}
	if len(dst) > 0 {
		dst = append(dst, '&')
	}
	dst = append(dst, esc...)
	if s, ok := scalarString(v); ok {
		return appendQueryEscaped(dst, s), nil
	}
	raw, err := appendJSONValue(nil, v)
	if err != nil {
		return dst, err
	}
	return appendQueryEscaped(dst, string(raw)), nil
}

// headerValues evaluates a header's values; none when every leaf is left
// out. A value that is not one line of text is bad_args about its
// argument: it could end the header line.
func (sh *shaper) headerValues(hf *headerField) ([]string, error) {
	if hf.leaf != nil {
		return sh.appendHeader(nil, hf.leaf, true)
	}
	var out []string
	for _, item := range hf.items {
		var err error
		if out, err = sh.appendHeader(out, item, false); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (sh *shaper) appendHeader(dst []string, n *node, listOK bool) ([]string, error) {
	v, ok, err := sh.value(n)
	if err != nil || !ok || v == nil {
		return dst, err
	}
	vals := []any{v}
	if list, isList := v.([]any); isList && listOK {
		vals = list
	}
	for _, e := range vals {
		if e == nil {
			continue
		}
		s, ok := scalarString(e)
		if !ok {
			return nil, &ArgError{Pointer: n.pointer(), Problem: ProblemScalar}
		}
		if !validHeaderValue(s) {
			return nil, &ArgError{Pointer: n.pointer(), Problem: ProblemInvalid, Detail: "a header value must be one line of text without control characters"}
		}
		dst = append(dst, s)
	}
	return dst, nil
}
