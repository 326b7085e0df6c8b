package contracts

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/toolgate/toolgate/internal/jsontape"
)

// BindingSpec is how a tool's arguments become the backend request, as
// written in the policy file.
type BindingSpec struct {
	Method string
	Path   string            // with {arg} placeholders
	Query  map[string]string // backend query parameter -> argument name
	Body   map[string]string // JSON body field -> argument name
}

// Binding is a compiled BindingSpec.
//
// Every placeholder value is escaped as exactly one path segment: the
// unreserved characters of RFC 3986 stay as they are and every other byte is
// percent-encoded, so a value cannot add a segment ("/"), start a query ("?")
// or fragment ("#"), smuggle an escape ("%"), or put CR/LF into the request
// line. A segment that would read "." or ".." is encoded as %2E so no value
// can climb the path, and an empty segment is refused.
type Binding struct {
	method   string
	segments []pathSegment
	query    []bindParam
	body     []bindParam
	args     []string // every argument the binding reads, sorted
}

type pathSegment struct {
	parts []pathPart
}

type pathPart struct {
	literal string
	arg     string // placeholder argument name when not empty
}

type bindParam struct {
	name string
	arg  string
}

// bindError is a binding that cannot be compiled; Field names the part of the
// spec at fault ("method", "path", "query.<name>", "body.<name>").
type bindError struct {
	Field string
	Msg   string
}

func (e *bindError) Error() string { return e.Field + ": " + e.Msg }

// compileBinding checks spec against the argument schema and compiles it.
func compileBinding(spec BindingSpec, schema *Schema) (*Binding, error) {
	b := &Binding{method: strings.ToUpper(spec.Method)}
	if b.method == "" {
		b.method = http.MethodGet
	}
	if !validMethod(b.method) {
		return nil, &bindError{"method", fmt.Sprintf("%q is not an HTTP method", spec.Method)}
	}
	if !strings.HasPrefix(spec.Path, "/") {
		return nil, &bindError{"path", "must start with /"}
	}
	if strings.ContainsAny(spec.Path, "?#") {
		return nil, &bindError{"path", "must not contain ? or #; bind query parameters with query"}
	}
	seen := map[string]bool{}
	for _, raw := range strings.Split(spec.Path[1:], "/") {
		seg, err := parseSegment(raw)
		if err != nil {
			return nil, &bindError{"path", err.Error()}
		}
		for _, p := range seg.parts {
			if p.arg == "" {
				continue
			}
			if !schema.hasProperty(p.arg) {
				return nil, &bindError{"path", fmt.Sprintf("placeholder {%s} is not an argument", p.arg)}
			}
			seen[p.arg] = true
		}
		b.segments = append(b.segments, seg)
	}
	var err error
	if b.query, err = compileParams("query", spec.Query, schema, seen); err != nil {
		return nil, err
	}
	if b.body, err = compileParams("body", spec.Body, schema, seen); err != nil {
		return nil, err
	}
	for a := range seen {
		b.args = append(b.args, a)
	}
	sort.Strings(b.args)
	return b, nil
}

func validMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return true
	}
	return false
}

func parseSegment(raw string) (pathSegment, error) {
	var seg pathSegment
	for raw != "" {
		open := strings.IndexByte(raw, '{')
		if open < 0 {
			if strings.ContainsRune(raw, '}') {
				return seg, errors.New("unbalanced } in path")
			}
			seg.parts = append(seg.parts, pathPart{literal: raw})
			break
		}
		if open > 0 {
			if strings.ContainsRune(raw[:open], '}') {
				return seg, errors.New("unbalanced } in path")
			}
			seg.parts = append(seg.parts, pathPart{literal: raw[:open]})
		}
		end := strings.IndexByte(raw[open:], '}')
		if end < 0 {
			return seg, errors.New("unbalanced { in path")
		}
		name := raw[open+1 : open+end]
		if name == "" || strings.ContainsAny(name, "{ ") {
			return seg, fmt.Errorf("invalid placeholder {%s}", name)
		}
		if n := len(seg.parts); n > 0 && seg.parts[n-1].arg != "" {
			return seg, errors.New("two placeholders must be separated by a literal")
		}
		seg.parts = append(seg.parts, pathPart{arg: name})
		raw = raw[open+end+1:]
	}
	for _, p := range seg.parts {
		if p.arg == "" && escapeSegment(p.literal) != p.literal && !validEscapes(p.literal) {
			return seg, fmt.Errorf("literal %q must be written percent-encoded", p.literal)
		}
	}
	return seg, nil
}

// validEscapes accepts literals that are already a valid percent-encoded
// segment (operators may write %20 in a path).
func validEscapes(s string) bool {
	if strings.ContainsAny(s, " \r\n\t?#") {
		return false
	}
	_, err := url.PathUnescape(s)
	return err == nil
}

func compileParams(field string, spec map[string]string, schema *Schema, seen map[string]bool) ([]bindParam, error) {
	names := make([]string, 0, len(spec))
	for name := range spec {
		names = append(names, name)
	}
	sort.Strings(names)
	params := make([]bindParam, 0, len(names))
	for _, name := range names {
		arg := spec[name]
		if name == "" {
			return nil, &bindError{field, "empty parameter name"}
		}
		if !schema.hasProperty(arg) {
			return nil, &bindError{field + "." + name, fmt.Sprintf("%q is not an argument", arg)}
		}
		seen[arg] = true
		params = append(params, bindParam{name: name, arg: arg})
	}
	return params, nil
}

// Method is the backend request's HTTP method.
func (b *Binding) Method() string { return b.method }

// Args returns every argument name the binding reads, sorted.
func (b *Binding) Args() []string { return b.args }

// pathArgs returns the arguments whose values go into the path, in order.
func (b *Binding) pathArgs() []string {
	var out []string
	for _, seg := range b.segments {
		for _, p := range seg.parts {
			if p.arg != "" {
				out = append(out, p.arg)
			}
		}
	}
	return out
}

// HasBody reports whether the binding sends a JSON body.
func (b *Binding) HasBody() bool { return len(b.body) > 0 }

// PathTemplate returns the path with its placeholders, as written.
func (b *Binding) PathTemplate() string {
	var sb strings.Builder
	for _, seg := range b.segments {
		sb.WriteByte('/')
		for _, p := range seg.parts {
			if p.arg != "" {
				sb.WriteString("{" + p.arg + "}")
			} else {
				sb.WriteString(p.literal)
			}
		}
	}
	return sb.String()
}

// Bound is a backend request built from arguments.
type Bound struct {
	Path  string // escaped path, starting with "/"
	Query string // encoded query, without "?"
	Body  []byte // JSON body, or nil
}

// Bind builds the backend request from validated arguments. Arguments the
// binding does not name are not sent. The error, when not nil, is an
// *ArgError.
func (b *Binding) Bind(args map[string]any) (Bound, error) {
	var out Bound
	path := make([]byte, 0, 64)
	for _, seg := range b.segments {
		path = append(path, '/')
		start := len(path)
		for _, p := range seg.parts {
			if p.arg == "" {
				path = append(path, p.literal...)
				continue
			}
			v, ok := args[p.arg]
			if !ok {
				return out, &ArgError{Pointer: "/" + escapePointer(p.arg), Problem: ProblemRequired}
			}
			s, ok := scalarString(v)
			if !ok {
				return out, &ArgError{Pointer: "/" + escapePointer(p.arg), Problem: ProblemScalar}
			}
			path = appendSegmentEscaped(path, s)
		}
		switch string(path[start:]) {
		case "":
			if len(seg.parts) > 0 {
				return out, &ArgError{Pointer: "/" + escapePointer(firstArg(seg)), Problem: ProblemSegment}
			}
		case ".", "..":
			if firstArg(seg) == "" {
				break // a literal dot segment written by the operator
			}
			dots := len(path) - start
			path = path[:start]
			for range dots {
				path = append(path, "%2E"...)
			}
		}
	}
	out.Path = string(path)
	if len(b.query) > 0 {
		var q []byte
		for _, p := range b.query {
			v, ok := args[p.arg]
			if !ok || v == nil {
				continue
			}
			if list, ok := v.([]any); ok {
				for _, item := range list {
					q = appendQueryParam(q, p.name, item)
				}
				continue
			}
			q = appendQueryParam(q, p.name, v)
		}
		out.Query = string(q)
	}
	if len(b.body) > 0 {
		body := make([]byte, 0, 128)
		body = append(body, '{')
		n := 0
		for _, p := range b.body {
			v, ok := args[p.arg]
			if !ok {
				continue
			}
			if n > 0 {
				body = append(body, ',')
			}
			n++
			body = AppendJSONString(body, p.name)
			body = append(body, ':')
			var err error
			if body, err = appendJSONValue(body, v); err != nil {
				return out, &ArgError{Pointer: "/" + escapePointer(p.arg), Problem: ProblemInvalid}
			}
		}
		out.Body = append(body, '}')
	}
	return out, nil
}

func firstArg(seg pathSegment) string {
	for _, p := range seg.parts {
		if p.arg != "" {
			return p.arg
		}
	}
	return ""
}

func appendQueryParam(q []byte, name string, v any) []byte {
	s, ok := scalarString(v)
	if !ok {
		b, err := appendJSONValue(nil, v)
		if err != nil {
			return q
		}
		s = string(b)
	}
	if len(q) > 0 {
		q = append(q, '&')
	}
	q = appendQueryEscaped(q, name)
	q = append(q, '=')
	return appendQueryEscaped(q, s)
}

// appendQueryEscaped appends s escaped as url.QueryEscape does, without
// an intermediate string.
func appendQueryEscaped(dst []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case isUnreserved(c):
			dst = append(dst, c)
		case c == ' ':
			dst = append(dst, '+')
		default:
			dst = append(dst, '%', hex[c>>4], hex[c&0xf])
		}
	}
	return dst
}

// scalarString formats a JSON scalar for a path segment or query value.
func scalarString(v any) (string, bool) {
	switch t := v.(type) {
	case string:
		return t, true
	case json.Number:
		return canonicalNumber(t), true
	case bool:
		return strconv.FormatBool(t), true
	case float64:
		return formatFloat(t)
	case int64:
		return strconv.FormatInt(t, 10), true
	case int:
		return strconv.Itoa(t), true
	}
	return "", false
}

// appendSegmentEscaped percent-encodes every byte of s outside RFC 3986's
// unreserved set.
func appendSegmentEscaped(dst []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isUnreserved(c) {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hex[c>>4], hex[c&0xf])
	}
	return dst
}

func escapeSegment(s string) string { return string(appendSegmentEscaped(nil, s)) }

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// appendJSONValue encodes a decoded JSON value, keeping json.Number verbatim
// and object keys sorted (arguments have no meaningful key order).
func appendJSONValue(dst []byte, v any) ([]byte, error) {
	switch t := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case string:
		return AppendJSONString(dst, t), nil
	case bool:
		return strconv.AppendBool(dst, t), nil
	case json.Number:
		if !jsontape.IsNumber(string(t)) {
			return dst, fmt.Errorf("invalid number %q", string(t))
		}
		return append(dst, canonicalNumber(t)...), nil
	case float64:
		f, ok := formatFloat(t)
		switch {
		case !ok:
			return dst, fmt.Errorf("%v is not a JSON number", t)
		case t != math.Trunc(t):
			return jsontape.AppendFloat(dst, t, 64), nil
		}
		return append(dst, f...), nil
	case int64:
		return strconv.AppendInt(dst, t, 10), nil
	case int:
		return strconv.AppendInt(dst, int64(t), 10), nil
	case []any:
		dst = append(dst, '[')
		for i, e := range t {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendJSONValue(dst, e); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendJSONString(dst, k)
			dst = append(dst, ':')
			var err error
			if dst, err = appendJSONValue(dst, t[k]); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// canonicalNumber spells an integral number as plain digits ("1e1" and
// "10.0" become "10", "1e20" becomes "100000000000000000000"): JSON Schema
// calls them integers, and a legacy backend parsing an integer parameter
// would choke on the exponent or read a float. Other numbers keep their
// spelling. Validation has refused numbers beyond the argument bounds, so
// an integer here has at most maxNumberExponent digits; one beyond them
// (never validated) is returned as written.
func canonicalNumber(n json.Number) string {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		return s
	}
	shape, ok := parseNumber(s)
	if !ok || !shape.inBounds() {
		return s
	}
	if b, ok := shape.appendInteger(make([]byte, 0, 24)); ok {
		return string(b)
	}
	return s
}

// formatFloat spells a float64 argument (handed over by an embedder) as
// canonicalNumber spells a JSON number: integral values as plain digits,
// never with an exponent; ok is false for NaN and the infinities, which
// no backend reads as a number.
func formatFloat(f float64) (string, bool) {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return "", false
	case f == math.Trunc(f):
		return strconv.FormatFloat(f, 'f', -1, 64), true
	}
	return strconv.FormatFloat(f, 'g', -1, 64), true
}
