package jsontape

import (
	"strconv"
	"unicode/utf8"
)

// Value is one value of a parsed document. The zero Value is not a value:
// every Value comes from Tape.Root, a lookup or an iteration. A Value is
// valid while its Tape is (see Tape.Release).
type Value struct {
	t   *tape
	i   int32
	gen uint32
}

// node returns the value's node, or panics once the tape was released.
func (v Value) node() *node {
	v.t.check(v.gen)
	return &v.t.nodes[v.i]
}

// raw returns the value's bytes in the source.
func (v Value) raw() []byte {
	n := v.node()
	return v.t.src[n.start:n.end]
}

// Kind returns the value's JSON type.
func (v Value) Kind() Kind { return v.node().kind }

// Len returns the number of elements of an array or members of an object;
// 0 for any other value.
func (v Value) Len() int { return int(v.node().count) }

// Text returns the value of a string, decoded as encoding/json decodes it:
// a lone or broken surrogate escape and an invalid UTF-8 byte each become
// U+FFFD. It returns "" for any other value.
func (v Value) Text() string {
	n := v.node()
	if n.kind != String {
		return ""
	}
	raw := v.t.src[n.start+1 : n.end-1]
	if !n.escaped && v.t.valid {
		return string(raw)
	}
	return unescape(raw)
}

// Equals reports whether the value is a string whose text is s, without
// allocating when the string has no escapes.
func (v Value) Equals(s string) bool {
	n := v.node()
	if n.kind != String {
		return false
	}
	if !n.escaped && v.t.valid {
		return string(v.t.src[n.start+1:n.end-1]) == s
	}
	return v.Text() == s
}

// Literal returns a number as written ("1.50e3"); "" for any other value.
func (v Value) Literal() string {
	if v.node().kind != Number {
		return ""
	}
	return string(v.raw())
}

// Int returns a number written as an integer that fits an int64. ok is
// false for any other value: a fraction, an exponent, a larger integer, a
// value of another kind.
func (v Value) Int() (n int64, ok bool) {
	if v.node().kind != Number {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v.raw()), 10, 64)
	return n, err == nil
}

// Float returns a number as the nearest float64, as encoding/json reads
// it. The error is strconv's for a number beyond float64's range (the
// result is then ±Inf); a value of another kind is 0 and ErrSyntax.
func (v Value) Float() (float64, error) {
	if v.node().kind != Number {
		return 0, ErrSyntax
	}
	return strconv.ParseFloat(string(v.raw()), 64)
}

// Lookup returns the value of key in an object. Of repeated keys the last
// counts, as in encoding/json. ok is false when the key is absent or the
// value is not an object.
func (v Value) Lookup(key string) (val Value, ok bool) {
	if v.node().kind != Object {
		return Value{}, false
	}
	for c := v.Cursor(); c.More(); {
		if k, e := c.Member(); k.Equals(key) {
			val, ok = e, true
		}
	}
	return val, ok
}

// Cursor walks an array's elements or an object's members in document
// order: for c := v.Cursor(); c.More(); { e := c.Element() }. Use Element
// on an array's cursor and Member on an object's. It is a cursor rather
// than a range-over-func iterator because the fast paths walk many small
// objects, and an iterator that is not inlined allocates its loop body on
// every call; a cursor allocates nothing, and can be handed to another
// library's iterator (CEL's).
type Cursor struct {
	t    *tape
	gen  uint32
	next int32 // the node of the next element or key
	left int32
}

// Cursor returns a cursor at the first element or member of an array or
// object; for any other value, a cursor with nothing left.
func (v Value) Cursor() Cursor {
	n := v.node()
	if n.kind != Array && n.kind != Object {
		return Cursor{t: v.t, gen: v.gen}
	}
	if n.lazy {
		// The container's own tape: its root is node 0.
		sub := v.t.expand(v.i)
		return Cursor{t: sub, gen: sub.gen, next: 1, left: n.count}
	}
	return Cursor{t: v.t, gen: v.gen, next: v.i + 1, left: n.count}
}

// Whole returns the value as read from a tape where its elements or
// members have nodes of their own, down to the depth a lazy tape gives
// them: a container of a lazy tape whose elements or members are lazy
// (the list of records of a large answer) is parsed once whole, rather
// than each element at the first read into it. A walk that reads into
// every element (a rule that maps every record) then pays one parse of
// the list, not one per record with its own tape. Any other value is
// returned as it is. The value read is the same either way (FuzzLazyTape).
func (v Value) Whole() Value {
	n := v.node()
	if n.kind != Array && n.kind != Object || n.lazy || n.count == 0 {
		return v
	}
	nodes := v.t.nodes
	e := v.i + 1
	for range n.count {
		if n.kind == Object {
			e++ // the member's value, after its key
		}
		if nodes[e].lazy {
			sub := v.t.expand(v.i)
			return Value{t: sub, i: 0, gen: sub.gen}
		}
		e = nodes[e].next
	}
	return v
}

// More reports whether an element or member is left.
func (c *Cursor) More() bool { return c.left > 0 }

// Element returns the next element of an array and moves past it. It must
// only be called while More is true.
func (c *Cursor) Element() Value {
	e := Value{c.t, c.next, c.gen}
	c.next = e.node().next
	c.left--
	return e
}

// Member returns the next member of an object and moves past it. It must
// only be called while More is true.
func (c *Cursor) Member() (key, val Value) {
	key, val = Value{c.t, c.next, c.gen}, Value{c.t, c.next + 1, c.gen}
	c.next = val.node().next
	c.left--
	return key, val
}

// Native decodes the value into Go values as encoding/json decodes into an
// any: map[string]any, []any, string, float64, bool and nil. A number
// beyond float64's range decodes as ±Inf where encoding/json refuses it.
func (v Value) Native() any {
	n := v.node()
	switch n.kind {
	case Null:
		return nil
	case False:
		return false
	case True:
		return true
	case Number:
		f, _ := v.Float()
		return f
	case String:
		return v.Text()
	case Array:
		out := make([]any, 0, n.count)
		for c := v.Cursor(); c.More(); {
			out = append(out, c.Element().Native())
		}
		return out
	default:
		out := make(map[string]any, n.count)
		for c := v.Cursor(); c.More(); {
			k, e := c.Member()
			out[k.Text()] = e.Native()
		}
		return out
	}
}

// AppendRaw appends the value's bytes as the source has them, white space
// inside the value included.
func (v Value) AppendRaw(dst []byte) []byte { return append(dst, v.raw()...) }

// AppendCompact appends the value as compact, valid-UTF-8 JSON in the
// source's key order and number spelling: white space between tokens is
// dropped and an invalid UTF-8 byte inside a string becomes U+FFFD.
func (v Value) AppendCompact(dst []byte) []byte {
	raw := v.raw()
	if v.t.compact {
		return append(dst, raw...)
	}
	return appendCompact(dst, raw)
}

// appendCompact copies valid JSON without insignificant white space,
// replacing invalid UTF-8 inside strings with U+FFFD.
func appendCompact(dst, src []byte) []byte {
	inString := false
	for i := 0; i < len(src); {
		c := src[i]
		if !inString {
			if !isSpace(c) {
				dst = append(dst, c)
				if c == '"' {
					inString = true
				}
			}
			i++
			continue
		}
		switch {
		case c == '\\':
			dst = append(dst, c, src[i+1])
			i += 2
		case c == '"':
			dst = append(dst, c)
			inString = false
			i++
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(src[i:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, "\ufffd"...)
			} else {
				dst = append(dst, src[i:i+size]...)
			}
			i += size
		}
	}
	return dst
}
