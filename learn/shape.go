package learn

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// maxItems is how many elements of one array are looked at.
const maxItems = 32

// maxSignatureKeys is how many keys a shape signature names.
const maxSignatureKeys = 8

// shaper adds decoded JSON values to a body shape within the bounds.
type shaper struct {
	maxKeys, maxDepth, maxFields, maxValues int
	// values keeps code-like strings of code-named fields (answers only,
	// and only with enum_values).
	values bool
}

// observe adds v to the body shape rooted at root.
func (sh *shaper) observe(root *Shape, v any) {
	sh.add(root, root, v, 0, false)
}

func (sh *shaper) add(root, s *Shape, v any, depth int, codeName bool) {
	s.Seen++
	inc(&s.Types, jsonType(v))
	switch v := v.(type) {
	case map[string]any:
		if depth >= sh.maxDepth {
			return
		}
		sawID := false
		for _, k := range slices.Sorted(maps.Keys(v)) {
			name := k
			if k == "" {
				s.OtherKeys++
				continue
			}
			if idLike(k) {
				// A map keyed by ids: one field stands for every key.
				if sawID {
					continue
				}
				name, sawID = "{key}", true
			}
			child := sh.field(root, s, name)
			if child == nil {
				s.OtherKeys++
				continue
			}
			sh.add(root, child, v[k], depth+1, name != "{key}" && codeFields[normalizeField(k)])
		}
	case []any:
		if len(v) == 0 {
			s.EmptyArrays++
		}
		if depth >= sh.maxDepth {
			return
		}
		items := sh.items(root, s)
		if items == nil {
			return
		}
		for i, e := range v {
			if i == maxItems {
				break
			}
			sh.add(root, items, e, depth+1, false)
		}
	case string:
		if codeName && sh.values {
			keepValue(&s.Values, &s.ValuesDropped, v, sh.maxValues)
		}
	}
}

// field returns s's field name, adding it while the bounds leave room (at
// most maxKeys fields in s, maxFields nodes under root); nil when the
// field is new and there is none.
func (sh *shaper) field(root, s *Shape, name string) *Shape {
	child := s.Fields[name]
	if child == nil && len(s.Fields) < sh.maxKeys && root.nodes < sh.maxFields {
		if s.Fields == nil {
			s.Fields = map[string]*Shape{}
		}
		child = &Shape{}
		s.Fields[name] = child
		root.nodes++
	}
	return child
}

// items returns the shape of s's array elements, adding it while root has
// room for one more node; nil when it is new and there is none.
func (sh *shaper) items(root, s *Shape) *Shape {
	if s.Items == nil && root.nodes < sh.maxFields {
		s.Items = &Shape{}
		root.nodes++
	}
	return s.Items
}

// keepValue counts v among a field's code values, or drops them all for
// good when v is not code-like or would be one value too many: a field
// whose values are not all codes is data, and none of it is kept.
func keepValue(values *map[string]int64, dropped *bool, v string, limit int) {
	if *dropped {
		return
	}
	if _, ok := (*values)[v]; !ok && (!codeLike(v) || len(*values) >= limit) {
		*values, *dropped = nil, true
		return
	}
	if *values == nil {
		*values = map[string]int64{}
	}
	(*values)[v]++
}

// jsonType names the JSON type of a decoded value; a number without a
// fraction or exponent is "integer".
func jsonType(v any) string {
	switch v := v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	case nil:
		return "null"
	case json.Number:
		if strings.ContainsAny(string(v), ".eE") {
			return "number"
		}
		return "integer"
	}
	return "null"
}

// signature describes an answer in a few words: its status and the top
// level of its JSON body ("200 {results,total}", "200 [...]"), or its
// media type when it is not JSON.
func signature(status int, mt string, parsed bool, v any, empty bool) string {
	code := strconv.Itoa(status)
	switch {
	case empty:
		return code + " no body"
	case !parsed && mt == "":
		return code + " unreadable"
	case !parsed:
		return code + " " + mt
	}
	switch v := v.(type) {
	case map[string]any:
		var names []string
		sawID := false
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if idLike(k) {
				if sawID {
					continue
				}
				k, sawID = "{key}", true
			}
			if len(names) == maxSignatureKeys {
				names = append(names, "…")
				break
			}
			names = append(names, k)
		}
		return code + " {" + strings.Join(names, ",") + "}"
	case []any:
		if len(v) == 0 {
			return code + " []"
		}
		return code + " [...]"
	}
	return code + " " + jsonType(v)
}

// mergeShape adds src into dst within the bounds; fields src holds that
// do not fit count as dst's other keys.
func (sh *shaper) mergeShape(root, dst, src *Shape) {
	dst.Seen += src.Seen
	for t, n := range src.Types {
		add(&dst.Types, t, n)
	}
	dst.OtherKeys += src.OtherKeys
	dst.EmptyArrays += src.EmptyArrays
	for _, name := range slices.Sorted(maps.Keys(src.Fields)) {
		child := src.Fields[name]
		d := sh.field(root, dst, name)
		if d == nil {
			dst.OtherKeys += child.Seen
			continue
		}
		sh.mergeShape(root, d, child)
	}
	if src.Items != nil {
		if items := sh.items(root, dst); items != nil {
			sh.mergeShape(root, items, src.Items)
		}
	}
	mergeValues(&dst.Values, &dst.ValuesDropped, src.Values, src.ValuesDropped, sh.maxValues)
}

// mergeValues adds one field's code values into another's, under the
// same rule as keepValue.
func mergeValues(dst *map[string]int64, dstDropped *bool, src map[string]int64, srcDropped bool, limit int) {
	if srcDropped {
		*dst, *dstDropped = nil, true
		return
	}
	for _, v := range slices.Sorted(maps.Keys(src)) {
		keepValue(dst, dstDropped, v, limit)
		if *dstDropped {
			return
		}
		(*dst)[v] += src[v] - 1
	}
}

// countNodes counts the shapes under s, s excluded.
func countNodes(s *Shape) int {
	if s == nil {
		return 0
	}
	n := 0
	for _, c := range s.Fields {
		n += 1 + countNodes(c)
	}
	if s.Items != nil {
		n += 1 + countNodes(s.Items)
	}
	return n
}

// stripValues removes every kept code value under s.
func stripValues(s *Shape) {
	if s == nil {
		return
	}
	s.Values = nil
	for _, c := range s.Fields {
		stripValues(c)
	}
	stripValues(s.Items)
}

func inc[K comparable](m *map[K]int64, k K) { add(m, k, 1) }

func add[K comparable](m *map[K]int64, k K, n int64) {
	if *m == nil {
		*m = map[K]int64{}
	}
	(*m)[k] += n
}

// entry returns (*m)[k], adding a zero one when k is new and m holds
// fewer than limit entries; nil when k is new and there is no room.
func entry[V any](m *map[string]*V, k string, limit int) *V {
	v := (*m)[k]
	if v == nil && len(*m) < limit {
		if *m == nil {
			*m = map[string]*V{}
		}
		v = new(V)
		(*m)[k] = v
	}
	return v
}
